"""Runs on disk and how they are made: training, evaluation, checkpoints, reference imports, caches.

Builds on the model and its inputs; knows nothing of analysis or figures.
"""
