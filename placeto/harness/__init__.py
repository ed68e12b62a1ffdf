"""The harness: comparing methods in simulation, evaluating them against measurements and on hardware, and their plots."""
