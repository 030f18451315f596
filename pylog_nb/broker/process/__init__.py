"""What every broker and controller process needs: a data directory lock, a clean shutdown."""
