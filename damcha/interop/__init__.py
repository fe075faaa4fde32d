"""Doors to interpretability tools (extra damcha[lens]; nothing else imports this layer): lens.py, TransformerLens's
canonical hooks on any mechanism; nnsight.py, nnsight traces with several invokes over the project's records."""
