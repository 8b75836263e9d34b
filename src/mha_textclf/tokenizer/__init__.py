"""The WordPiece tokenizer: learning it (wordpiece.py), its size (vocabulary.py), the cache (cache.py), encoding
texts (encoding.py)."""
