"""Sweeps: each job's and the sweep's record (record.py), the runs as tables (collect.py), paired comparisons
(compare.py), summary.md (markdown.py), plots (plots.py), all of it written (summary.py; summary.html is pages/'s),
and the Hydra callback (callback.py)."""
