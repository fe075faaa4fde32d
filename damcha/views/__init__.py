"""Figures and export: pure plotly figures of records, named figure sets, files with provenance.

Builds on everything below it; the app and the `figures` command draw through it.
"""
