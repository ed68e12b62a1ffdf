"""Placing with a trained gdp policy: zero-shot (one forward pass), sampled, or fine-tuned first.

`run_gdp` is the compare row "gdp" (placeto.compare.run_learned dispatches to it): the policy is loaded and
its functions compiled outside the meter (reported as compile seconds); inside it, optional PPO fine-tuning
on the graph, then the greedy placement and, while the call budget allows, batches of sampled placements;
the best objective wins.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from placeto.baselines import MethodRun
from placeto.checkpoint_io import CHECKPOINT, CONFIG, read_blob, restore
from placeto.methods.gdp import METHOD
from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.model import make_net, sample
from placeto.methods.gdp.ppo import init_params, make_optimizer, make_task, ppo_step
from placeto.objective import meter, metered, score_batch
from simulator.cluster import Cluster
from simulator.errors import InputError
from simulator.graph import Graph
from simulator.io import PathLike, read_json


def is_gdp_run(run_dir: PathLike | None) -> bool:
    """True if `run_dir`/config.json exists and records "method": "gdp"."""
    if run_dir is None:
        return False
    path = Path(str(run_dir)) / CONFIG
    if not path.is_file():
        return False
    d = read_json(path)
    return isinstance(d, dict) and d.get("method") == METHOD


def is_gdp_checkpoint(name_or_dir: PathLike | None) -> bool:
    """True if a shipped policy name or run directory is a gdp one (False for None or anything unresolvable)."""
    from placeto.policies import resolve_checkpoint

    if name_or_dir is None:
        return False
    try:
        return is_gdp_run(resolve_checkpoint(name_or_dir))
    except InputError:
        return False


def load_run(run_dir: PathLike) -> tuple[GdpConfig, Any]:
    """(config, params) of a gdp run directory; InputError naming the file if it is not a readable one."""
    run_dir = Path(str(run_dir))
    d = read_json(run_dir / CONFIG)
    try:
        config = GdpConfig.from_dict(d if isinstance(d, dict) else {})
    except (TypeError, ValueError) as e:
        raise InputError(str(e), str(run_dir / CONFIG)) from None
    from simulator.cluster import cluster_preset
    from simulator.generate import layered_dag

    probe = make_task(layered_dag(8, seed=0), cluster_preset("placeto-k80", min(2, config.max_devices)), config)
    path = run_dir / CHECKPOINT
    return config, restore(init_params(config, probe), read_blob(path)["params"], "params", path)


def greedy_placement(config: GdpConfig, params: Any, graph: Graph, cluster: Cluster) -> np.ndarray:
    """int32[N] each node on its most likely device: one forward pass, no simulation."""
    if cluster.n_devices > config.max_devices:
        raise InputError(f"the gdp policy places on at most {config.max_devices} devices (max_devices), not "
                         f"{cluster.n_devices}")
    task = make_task(graph, cluster, config)
    _, greedy = _sample(make_net(config), params, task.inputs, jax.random.key(0), 1)
    return np.asarray(greedy)[:graph.n_nodes].astype(np.int32)


_sample = jax.jit(sample, static_argnames=("net", "batch"))


def run_gdp(graph: Graph, cluster: Cluster, checkpoint: PathLike, seed: int = 0, budget: float | None = None,
            seconds: float | None = None, finetune_episodes: int = 0) -> tuple[MethodRun, float]:
    """(MethodRun, compile seconds): see the module docstring. `finetune_episodes` sampled placements of
    PPO fine-tuning first (in updates of config.samples_per_update, charged to the budget)."""
    from placeto.policies import resolve_checkpoint

    t0 = time.perf_counter()
    config, params = load_run(resolve_checkpoint(checkpoint))
    if cluster.n_devices > config.max_devices:
        raise InputError(f"the gdp policy places on at most {config.max_devices} devices, not {cluster.n_devices}",
                         str(checkpoint))
    net, task = make_net(config), make_task(graph, cluster, config)
    batch = config.samples_per_update
    jax.block_until_ready(_sample(net, params, task.inputs, jax.random.key(0), batch))  # compile, unmetered
    compile_s = time.perf_counter() - t0
    calls = math.inf if budget is None else budget
    with metered(max_calls=calls, seconds=seconds) as m:
        params = finetune(config, params, task, seed, -(-finetune_episodes // config.samples_per_update))
        key = jax.random.key(seed)
        draws, greedy = _sample(net, params, task.inputs, key, batch)
        n = graph.n_nodes
        best_p = np.asarray(greedy)[:n]
        best = float(score_batch(graph, best_p[None], cluster, config.memory_penalty_per_gb)[0])
        while not meter().exhausted() and m.calls_left() >= 1:
            rows = np.asarray(draws)[:int(min(batch, m.calls_left())), :n]
            obj = score_batch(graph, rows, cluster, config.memory_penalty_per_gb)
            if obj.min() < best:
                best, best_p = float(obj.min()), rows[int(np.argmin(obj))]
            key = jax.random.fold_in(key, m.calls)
            draws, _ = _sample(net, params, task.inputs, key, batch)
        elapsed = m.elapsed()
    return MethodRun(best_p.astype(np.int32), m.calls, elapsed, tuple(m.trace)), compile_s


def finetune(config: GdpConfig, params: Any, task, seed: int, updates: int) -> Any:
    """`updates` PPO updates on one task from `params` (fresh Adam state); stops early when the meter's budget
    cannot pay for another batch. Returns the tuned parameters."""
    if updates <= 0:
        return params
    net, optimizer = make_net(config), make_optimizer(config)
    opt_state, root = optimizer.init(params), jax.random.key(seed)
    for u in range(updates):
        if meter().exhausted() or meter().calls_left() < config.samples_per_update:
            break
        params, opt_state = ppo_step(net, config, optimizer, params, opt_state, task, jax.random.fold_in(root, u))[:2]
    return params
