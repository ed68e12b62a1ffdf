"""Coarsening: how the policy places graphs too large for it.

Placeto's MDP visits every node once per pass and its features hold an N x N reachability matrix, so a placing
of an unseen 10,000-node graph does not finish in minutes. A graph of more than `MAX_POLICY_NODES` nodes is
therefore grouped first (`simulator.grouping.group.group` to `COARSE_GROUPS` groups: colocation, contractions that
delay nothing, critical-path-greedy merging), the policy places the groups, and the group placement is expanded
back to every op (`expand_placement`). The grouping's wall time is part of the placing time.

The simulator calls a method makes on the grouped graph count as calls (one simulation each); their objective
values are the grouped graph's, which is why the final placement is always re-simulated on the op graph.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.grouping.group import Grouping, expand_placement, group

MAX_POLICY_NODES = 1000  # the largest benchmark graph (nmt_l8, 1,000 groups) is still placed as it is
COARSE_GROUPS = 400  # the size of the graphs the shipped policies were trained on (family graphs: 200-400 groups)


class Coarse(NamedTuple):
    """A graph as the policy sees it, and the seconds grouping took.

    `grouping` is None when the graph is placed as it is.
    """

    graph: Graph
    grouping: Grouping | None
    seconds: float  # wall seconds spent grouping (0 when the graph is small enough)

    def expand(self, placement: np.ndarray) -> np.ndarray:
        """int32[N ops] from a placement int[G] of `self.graph`'s nodes."""
        p = np.asarray(placement, np.int32)
        return p if self.grouping is None else expand_placement(self.grouping, p)


def for_policy(graph: Graph, max_nodes: int | None = None, groups: int | None = None) -> Coarse:
    """`graph` as the policy places it: as it is if small, else grouped.

    Args:
      max_nodes: the most nodes placed as they are (default `MAX_POLICY_NODES`).
      groups: the group count of a larger graph (default `COARSE_GROUPS`). Colocation names may merge (their ops
        then share one device), so that colocation alone never keeps the graph large.

    Raises:
      InputError: if the grouping still has more than `max_nodes` groups.
    """
    max_nodes = MAX_POLICY_NODES if max_nodes is None else max_nodes
    if graph.n_nodes <= max_nodes:
        return Coarse(graph, None, 0.0)
    t0 = time.perf_counter()
    grouping = group(graph, COARSE_GROUPS if groups is None else groups, join_names=True)
    if grouping.graph.n_nodes > max_nodes:
        raise InputError(f"{graph.name}: grouping its {graph.n_nodes} nodes left {grouping.graph.n_nodes} groups, "
                         f"more than the policy places ({max_nodes})")
    return Coarse(grouping.graph, grouping, time.perf_counter() - t0)
