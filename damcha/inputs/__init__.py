"""What a model reads: data sets, modalities, upload decoding, model inputs of a run, synthetic tasks.

Builds on the model only (its config and token conventions).
"""
