"""Sans-IO transaction coordinator (KIP-98) and its ``__transaction_state`` records."""
