"""Kafka wire protocol: framing, headers, versions and message codecs (sans-IO)."""
