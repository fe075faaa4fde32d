"""The paper's claims tested at small scale (claims), and the efficiency measurements they use.

The top layer: it trains and evaluates runs through everything below.
"""
