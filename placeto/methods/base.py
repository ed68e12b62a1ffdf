"""The one interface every learned method exports: `METHOD`, a `Method`.

Each method package exports it as `placeto.methods.<name>.METHOD`. A method is a frozen record of plain functions
(as optax's `GradientTransformation` is a pair of them), so the registry (placeto.methods.registry), the
comparison (placeto.harness.compare), the shipped policies and the CLI reach every learned method the same way.
Its functions are `Ref`s: each names a function of the method's modules by its import path, and imports that
module when first called, so that building a Method (and listing the methods, reading their names, presets and
default checkpoints: the CLI's parser does) imports none of the heavy modules (jax, flax). The paths are
module-level strings, which the import-cycle test (tests/test_import_cycles.py) counts as imports: a dependency
loaded by name is still a dependency.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from pathlib import Path
from typing import Any, Callable, Mapping

# (args, graphs, clusters, workers) -> exit status: `placeto train --method <name>`, printing a summary
TrainFn = Callable[[argparse.Namespace, list, list, Any], int]
# (variant, graph, cluster, seed, budget, seconds, checkpoint, finetune_episodes) -> (MethodRun, compile seconds):
# one compare row, everything inside one meter (placeto.objective.metered)
RunFn = Callable[..., tuple[Any, float]]
# run directory -> (config, params) restored into the method's network
LoadFn = Callable[[Path], tuple[Any, Any]]
# (graph, cluster, checkpoint, samples, seed) -> (placement int32[N], simulator calls): zero-shot placement
# without a budget (`placeto place` with no --budget / --seconds)
PlaceFn = Callable[..., tuple[Any, int]]
# (graph, cluster, checkpoint, simulator calls) -> a line on how the method's policy read this graph, or None
NoteFn = Callable[..., "str | None"]
# (checkpoint or None: the default, graph) -> simulator calls of the greedy placement (place's default budget)
CallsFn = Callable[..., int]
LARGE_GRAPH_NODES = 1000  # above this, a method's large_checkpoint (if any) is its default (coarsen's threshold)


def default_for(n_nodes: int, default: str | None, large: str | None) -> str | None:
    """The default checkpoint for a graph of `n_nodes` nodes.

    `large` (if any) above LARGE_GRAPH_NODES nodes, else `default`.
    """
    return large if large and n_nodes > LARGE_GRAPH_NODES else default


@dataclasses.dataclass(frozen=True)
class Ref:
    """A function named by its import path, imported on the first call.

    `path` is "package.module:function"; the call passes `args` before the caller's. The module is imported by
    name (importlib), as the registry loads a method.
    """

    path: str
    args: tuple = ()

    def __call__(self, *args, **kwargs):
        module, _, name = self.path.partition(":")
        return getattr(importlib.import_module(module), name)(*self.args, *args, **kwargs)


@dataclasses.dataclass(frozen=True)
class Method:
    """One learned placement method (see the module docstring)."""

    name: str  # config.json's "method" field of its run directories ("placeto" when the field is absent)
    description: str
    config_cls: type  # its frozen config dataclass (to_json / from_dict)
    presets: Mapping[str, Callable[..., Any]]  # "default", "tiny", ... -> config
    variants: tuple[str, ...]  # the compare rows it provides, e.g. ("gdp", "gdp-search")
    train: TrainFn
    run: RunFn
    load: LoadFn
    per_graph: bool = False  # trained on the one graph it places (rnn, hierarchical), not on a family
    finetunes: bool = False  # `run` accepts finetune_episodes > 0 (fine-tuning on the graph before placing)
    default_checkpoint: str | None = None  # shipped policy used when no checkpoint of this method is given
    large_checkpoint: str | None = None  # ... instead, for graphs of more than LARGE_GRAPH_NODES nodes

    def default_for(self, n_nodes: int) -> str | None:
        """The shipped policy for a graph of `n_nodes` nodes, absent a checkpoint."""
        return default_for(n_nodes, self.default_checkpoint, self.large_checkpoint)
    place: PlaceFn | None = None  # zero-shot placement without a budget (None: every placement goes through run)
    note: NoteFn | None = None  # what `placeto place` adds about how the policy read the graph (None: nothing)
    greedy_calls: CallsFn | None = None  # simulator calls of its greedy placement (None: not budgeted in calls)
