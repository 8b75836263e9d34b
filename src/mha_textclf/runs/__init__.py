"""The run folder: its files and their one writer and readers (files.py), metrics.json (metrics.py), checkpoints
(checkpoint.py), its lifecycle (lifecycle.py)."""
