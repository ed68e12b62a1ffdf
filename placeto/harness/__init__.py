"""The harness: compare methods, evaluate them on hardware, plot the results."""
