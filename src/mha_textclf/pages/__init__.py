"""One HTML page per run (report.html) and per sweep (summary.html): self-contained, rendered from templates."""
