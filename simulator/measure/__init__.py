"""Measuring on real devices: op and step profiles, calibration and fits, the caches of what was measured."""
