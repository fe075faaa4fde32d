"""The model: its config, the transformer, and the attention mechanisms it can use.

Nothing here knows of inputs, runs, analysis or figures; everything else builds on it.
"""
