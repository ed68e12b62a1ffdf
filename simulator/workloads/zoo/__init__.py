"""Flax training steps, traced into the families and benchmarks.

Every program is a real training step (forward, loss, backward, optax update) whose recurrences and
layers are unrolled Python loops, so `jax.make_jaxpr(p.step)(p.params, p.opt_state, p.batch)` holds one
equation per op per time step. See `common.Program` for the contract and name-stack conventions.

    >>> from simulator.workloads import zoo
    >>> program = zoo.build_program("nmt", seed=0, layers=4, tgt_len=20)
    >>> [spec.name for spec in zoo.list_benchmarks()]  # doctest: +ELLIPSIS
    ['inception_v3', 'nmt_l2', ...]
"""

from simulator.workloads.zoo.common import Program, count_equations, name_stacks
from simulator.workloads.zoo.enas_cifar10 import ConvCellArch, sample_conv_cell
from simulator.workloads.zoo.enas_ptb import RNNCellArch, sample_rnn_cell
from simulator.workloads.zoo.registry import PROGRAMS, ProgramSpec, build_benchmark, build_program, list_benchmarks

__all__ = [
    "PROGRAMS",
    "ConvCellArch",
    "Program",
    "ProgramSpec",
    "RNNCellArch",
    "build_benchmark",
    "build_program",
    "count_equations",
    "list_benchmarks",
    "name_stacks",
    "sample_conv_cell",
    "sample_rnn_cell",
]
