"""placeto: learned device placement for computation graphs (the agent: features, policy, training, baselines)."""

__version__ = "0.1.0"
