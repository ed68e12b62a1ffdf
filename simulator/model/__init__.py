"""Graphs and clusters: file formats, limits, analytic costs, stats."""
