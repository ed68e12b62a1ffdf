"""Speed, scale and fidelity: the simulator, the hardware harness, training throughput, start-up, simulated against
measured step times, and every method at equal budgets (experiments/README.md)."""
