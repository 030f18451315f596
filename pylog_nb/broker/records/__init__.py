"""RecordBatch v2: the fixed header (header.py), codecs (codecs.py), records (batch.py)."""
