"""Doors to interpretability tools (extra damcha[lens]; nothing else imports this layer): nnsight.py, the
project's Transformer under nnsight with several invokes batched into one forward pass."""
