"""DAMCHA itself: the metric maths (context, generator f, row sum, fused form) and its attention layer.

`metric` holds the maths, `layer` the attention layer and the mechanism's declarations.
"""
