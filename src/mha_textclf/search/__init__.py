"""The hyperparameter search: its space (space.py), the study (study.py), the workers that share one (workers.py)."""
