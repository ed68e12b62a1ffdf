"""Comparing methods, evaluating them on hardware, plotting them."""
