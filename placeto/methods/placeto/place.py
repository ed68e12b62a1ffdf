"""Zero-shot placement with a trained policy: one greedy episode, or the best of K.

One greedy episode, or the best of K sampled episodes; episodes are placeto.methods.placeto.rollout's, shared
with training. Every step of an episode simulates its placement anyway, so the best placement seen during the
episode(s) is returned, not only the last one; the simulator-call count is what that cost.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from placeto import coarsen
from placeto.methods.placeto import env as E
from placeto.checkpoint_io import check_devices, param_template, read_blob, restore
from placeto.checkpoint_io import read_config as read_method_config
from placeto.methods.placeto.config import PlacetoConfig
from placeto.features import graph_arrays
from placeto.methods.placeto.policy import make_policy
from placeto.methods.placeto.rollout import collect_rollout
from placeto.objective import score_batch
from placeto.policies import resolve_checkpoint
from simulator.model.cluster import Cluster, cluster_preset
from simulator.model.generate import layered_dag
from simulator.model.graph import Graph
from simulator.model.errors import InputError
from simulator.model.io import PathLike, read_json
from simulator.model.limits import short_repr


CHECKPOINT = "checkpoint.msgpack"  # in a run directory, beside config.json


# ---- placement -----------------------------------------------------------------------------------------
def read_config(run_dir: PathLike) -> PlacetoConfig:
    """The PlacetoConfig in `run_dir`/config.json.

    See placeto.checkpoint_io.read_config: an InputError names the file and the field if it is not one.
    """
    return read_method_config(run_dir, PlacetoConfig)


def load_params(checkpoint_dir: str | Path) -> tuple[PlacetoConfig, Any]:
    """(config, params) of a run directory, for placement with a trained policy.

    Raises:
      InputError: naming config.json or the checkpoint and the field, if either is not this model's.
    """
    d = Path(checkpoint_dir)
    config = read_config(d)
    return config, restore(policy_template(config), read_blob(d / CHECKPOINT)["params"], "params", d / CHECKPOINT)


def policy_template(config: PlacetoConfig) -> Any:
    """The parameter pytree of `config`'s network, zero-filled (`checkpoint_io.param_template`).

    Parameter shapes do not depend on the graph, so a small probe graph gives them; memoised per network (the
    trace is a quarter of a second, more than the pass itself on a graph of a few hundred nodes), so placing many
    graphs with one policy traces it once.
    """
    return _template(make_policy(config))


@functools.lru_cache(maxsize=None)
def _template(policy) -> Any:
    probe = layered_dag(8, seed=0)
    cluster = cluster_preset("placeto-k80", min(2, policy.net.max_devices))
    arrays = jax.device_put(graph_arrays(probe, cluster, np.arange(probe.n_nodes, dtype=np.int32),
                                         policy.net.max_devices))  # jax arrays: indexed by tracers in the trace
    return param_template(lambda: policy.init(jax.random.key(0), arrays))


class PlaceResult(NamedTuple):
    placement: np.ndarray  # int32[N] best placement seen
    runtime: float  # its objective (placeto.objective), microseconds
    final_placement: np.ndarray  # int32[N] where the (first) episode ended
    final_runtime: float  # microseconds (objective)
    sim_calls: int


def place(graph: Graph, cluster: Cluster, checkpoint_dir: str | Path | None = None, samples: int = 0,
          seed: int = 0, initial: np.ndarray | None = None) -> PlaceResult:
    """Place `graph`: a greedy episode plus `samples` sampled episodes.

    With the policy of `checkpoint_dir`: a run directory, a shipped policy's name, or None (the default shipped
    policy). Returns the best placement any episode visited (the greedy episode's end in `final_placement`). Episodes
    start from `initial` (int[N]) if given, else from the run's configured initial placement. A graph of more than
    `coarsen.MAX_POLICY_NODES` nodes (and no `initial`) is placed as groups and expanded (`placeto.coarsen`); the
    runtimes are then re-simulated on `graph`, and the graph's own list start (the run's init_placement "etf" or
    "list") is returned where the expansion is worse, so the pass is never worse than where it would start.
    """
    coarse = coarsen.for_policy(graph) if initial is None else coarsen.Coarse(graph, None, 0.0)
    if coarse.grouping is not None:
        res = place(coarse.graph, cluster, checkpoint_dir, samples, seed)
        cands = [coarse.expand(res.placement), coarse.expand(res.final_placement)]
        kind = load_config(checkpoint_dir).init_placement
        if kind in E.LIST_STARTS:  # the graph's own list start: what the groups' expansion must beat
            cands.append(E.list_start(graph, cluster, kind))
        runtimes = score_batch(graph, np.stack(cands), cluster)
        i = 2 if len(cands) > 2 and runtimes[2] < runtimes[0] else 0
        return PlaceResult(cands[i], float(runtimes[i]), cands[1], float(runtimes[1]), res.sim_calls + len(cands))

    checkpoint_dir = resolve_checkpoint(checkpoint_dir)
    config = read_config(checkpoint_dir)
    check_devices(config, cluster.n_devices, checkpoint_dir)
    _, params = load_params(checkpoint_dir)  # a corrupt checkpoint fails before the graph's context is built
    ctx = E.make_context(graph, cluster, config)
    arrays = jax.device_put(ctx.arrays)
    policy = make_policy(config)
    key = jax.random.key(seed)
    rollouts = [collect_rollout(policy, params, ctx, arrays, key, 1, seed, greedy=True, record=False,
                                placement=initial)]
    batch = config.episodes_per_update
    for i in range(0, max(samples, 0), batch):
        rollouts.append(collect_rollout(policy, params, ctx, arrays, jax.random.fold_in(key, i),
                                        min(batch, samples - i), seed + i, record=False, placement=initial))
    best = min(((ro.best_runtime[b], ro.best_placement[b]) for ro in rollouts
                for b in range(len(ro.best_runtime))), key=lambda x: x[0])
    first = rollouts[0]
    return PlaceResult(best[1].astype(np.int32), float(best[0]), first.final_placement[0].astype(np.int32),
                       float(first.final_runtime[0]), sum(ro.sim_calls for ro in rollouts))


def place_graph(graph: Graph, cluster: Cluster, checkpoint_dir: str | Path | None = None, samples: int = 0,
                seed: int = 0) -> tuple[np.ndarray, int]:
    """Placeto's Method.place: (best placement int32[N], simulator calls).

    `place` with the policy in `checkpoint_dir`, on `graph`.
    """
    res = place(graph, cluster, checkpoint_dir, samples, seed)
    return res.placement, res.sim_calls


def load_config(checkpoint: PathLike | None) -> PlacetoConfig:
    """The PlacetoConfig of a shipped policy or run directory.

    Raises:
      InputError: for another method's run directory (its config.json's "method", which a Placeto run leaves out
        or sets to "placeto").
    """
    path = resolve_checkpoint(checkpoint)
    d = read_json(path / "config.json")
    method = d.get("method", "placeto") if isinstance(d, dict) else "placeto"
    if method != "placeto":
        what = f"a {method} run directory" if isinstance(method, str) else f"config.json's \"method\" is " \
                                                                              f"{short_repr(method)}"
        raise InputError(f"{what}, not a Placeto one", str(path))
    return read_config(path)  # validated: InputError naming config.json and the field


def load_policy_params(checkpoint: PathLike | None) -> tuple[PlacetoConfig, Any]:
    """(config, params) of a shipped policy or run directory.

    The params are restored into the network's structure.
    """
    config = load_config(checkpoint)
    path = resolve_checkpoint(checkpoint) / CHECKPOINT
    return config, restore(policy_template(config), read_blob(path)["params"], "params", path)  # InputError
