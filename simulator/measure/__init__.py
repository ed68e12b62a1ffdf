"""Measuring on real devices: profiles, calibration, fits, and their caches."""
