"""Looking inside trained runs: inspection records, dynamics over epochs, attribution, ablations, interventions.

Builds on the model, inputs and runs; knows nothing of figures.
"""
