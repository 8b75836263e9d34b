"""Corpora: loading and splitting them (corpus.py), batching their token ids (batches.py)."""
