"""Learned placement methods beside Placeto, one subpackage each (config, network, update rule, placing)."""
