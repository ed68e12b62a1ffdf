"""placeto: learned device placement for computation graphs.

The agent: features, policy, training, baselines.
"""

__version__ = "0.1.0"
