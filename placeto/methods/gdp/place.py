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
from placeto.checkpoint_io import CHECKPOINT, CONFIG, param_template, read_blob, restore
from placeto.methods.gdp.config import NAME
from placeto.methods.gdp.config import FinetuneSettings, GdpConfig
from placeto.methods.gdp.model import log_policy, make_net, sample
from placeto.methods.gdp.ppo import Drawn, init_params, make_optimizer, make_task, ppo_step, sample_batch
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
    return isinstance(d, dict) and d.get("method") == NAME


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
    template = param_template(lambda: init_params(config, probe))
    return config, restore(template, read_blob(path)["params"], "params", path)


def greedy_placement(config: GdpConfig, params: Any, graph: Graph, cluster: Cluster) -> np.ndarray:
    """int32[N] each node on its most likely device: one forward pass, no simulation."""
    if cluster.n_devices > config.max_devices:
        raise InputError(f"the gdp policy places on at most {config.max_devices} devices (max_devices), not "
                         f"{cluster.n_devices}")
    task = make_task(graph, cluster, config)
    _, greedy = _sample(make_net(config), params, task.inputs, jax.random.key(0), 1)
    return np.asarray(greedy)[:graph.n_nodes].astype(np.int32)


def timed_greedy(config: GdpConfig, params: Any, graph: Graph, cluster: Cluster) -> tuple[np.ndarray, float, float]:
    """(`greedy_placement` int32[N], its wall seconds after compilation, the first call's seconds: compilation
    included). For experiments that report the zero-shot time apart from the one-time compilation."""
    t0 = time.perf_counter()
    greedy_placement(config, params, graph, cluster)
    t1 = time.perf_counter()
    placement = greedy_placement(config, params, graph, cluster)
    return placement, time.perf_counter() - t1, t1 - t0


_sample = jax.jit(sample, static_argnames=("net", "batch"))


def run_gdp(graph: Graph, cluster: Cluster, checkpoint: PathLike, seed: int = 0, budget: float | None = None,
            seconds: float | None = None, finetune_episodes: int = 0, search: bool = False,
            tune: FinetuneSettings | None = None) -> tuple[MethodRun, float]:
    """(MethodRun, compile seconds): see the module docstring. `finetune_episodes` sampled placements of
    PPO fine-tuning first (`tune`'s settings, default FinetuneSettings(); charged to the budget, its compilation
    is not). `search` (method gdp-search): after the greedy placement, the policy's per-node device distributions
    are the prior of placeto-search's annealing (`placeto.search.prior.search_from_prior`) for the rest of the
    budget, instead of sampled placements."""
    from placeto.policies import resolve_checkpoint

    t0 = time.perf_counter()
    config, params = load_run(resolve_checkpoint(checkpoint))
    if cluster.n_devices > config.max_devices:
        raise InputError(f"the gdp policy places on at most {config.max_devices} devices, not {cluster.n_devices}",
                         str(checkpoint))
    net, task = make_net(config), make_task(graph, cluster, config)
    tuning = (tune or FinetuneSettings()).apply(config)
    if search:  # compile, unmetered
        jax.block_until_ready(_log_policy(net, params, task.inputs))
    else:
        jax.block_until_ready(_sample(net, params, task.inputs, jax.random.key(0), config.samples_per_update))
    with metered():  # loads (or compiles) the simulator and the PPO update; these simulations are charged to no one
        score_batch(graph, np.zeros((1, graph.n_nodes), np.int32), cluster)
        if finetune_episodes > 0:
            finetune(tuning, params, task, seed, 1)
    compile_s = time.perf_counter() - t0
    calls = math.inf if budget is None else budget
    with metered(max_calls=calls, seconds=seconds) as m:
        updates = -(-finetune_episodes // tuning.samples_per_update)
        params, seen_p, seen = finetune(tuning, params, task, seed, updates)
        extra = [] if seen_p is None else [(seen_p, seen)]  # the best placement sampled while fine-tuning
        if search:
            best_p = _search(graph, cluster, net, params, task, seed, calls, extra)
        else:
            best_p = _sampled(config, net, params, task, seed, extra)
        elapsed = m.elapsed()
    return MethodRun(best_p.astype(np.int32), m.calls, elapsed, tuple(m.trace)), compile_s


def _sampled(config: GdpConfig, net, params, task, seed: int, extra: list) -> np.ndarray:
    """The gdp method inside its meter: the greedy placement, then batches of config.samples_per_update sampled
    placements while the meter lasts; int32[N] the best of them and of `extra` ((placement, objective) pairs)."""
    graph, cluster, n, m = task.graph, task.cluster, task.graph.n_nodes, meter()
    key = jax.random.key(seed)
    draws, greedy = _sample(net, params, task.inputs, key, config.samples_per_update)
    best_p = np.asarray(greedy)[:n]
    best = float(score_batch(graph, best_p[None], cluster, config.memory_penalty_per_gb)[0])
    best, best_p = min([(best, best_p), *((o, p) for p, o in extra)], key=lambda c: c[0])
    while not m.exhausted() and m.calls_left() >= 1:
        rows = np.asarray(draws)[:int(min(config.samples_per_update, m.calls_left())), :n]
        obj = score_batch(graph, rows, cluster, config.memory_penalty_per_gb)
        if obj.min() < best:
            best, best_p = float(obj.min()), rows[int(np.argmin(obj))]
        key = jax.random.fold_in(key, m.calls)
        draws, _ = _sample(net, params, task.inputs, key, config.samples_per_update)
    return best_p


_log_policy = jax.jit(log_policy, static_argnames=("net",))


def _search(graph: Graph, cluster: Cluster, net, params, task, seed: int, limit: float, extra: list) -> np.ndarray:
    """gdp-search: the policy's greedy placement (argmax per node, one simulation) and prior (float[N, D]: each
    node's device distribution) start and steer placeto-search's annealing, until the meter's count reaches
    `limit` or it runs out; `extra`: more (placement, objective) start candidates."""
    from placeto.search.prior import search_from_prior

    d = cluster.n_devices
    logp = np.asarray(_log_policy(net, params, task.inputs), np.float64)[:graph.n_nodes, :d]
    prior = np.exp(logp - logp.max(1, keepdims=True))
    prior /= prior.sum(1, keepdims=True)
    greedy = prior.argmax(1).astype(np.int32)
    score = float(score_batch(graph, greedy[None], cluster)[0])
    if meter().exhausted():
        return min([(greedy, score), *extra], key=lambda c: c[1])[0]
    return search_from_prior(graph, cluster, greedy, score, prior, np.random.default_rng(seed), limit, extra)


def finetune(config: GdpConfig, params: Any, task, seed: int, updates: int) -> tuple[Any, np.ndarray | None, float]:
    """`updates` PPO updates on one task from `params` (fresh Adam state) with `config`'s batch, epochs and
    learning rate (run_gdp passes the policy's config with FinetuneSettings applied); stops early when the meter's
    budget cannot pay for another batch. Each update's forward pass also gives the current greedy placement,
    simulated with the batch (one call more; not learned from). Returns (tuned parameters, best placement int32[N]
    sampled or greedy on the way or None, its objective in microseconds or inf)."""
    best_p, best = None, math.inf
    if updates <= 0:
        return params, best_p, best
    net, optimizer = make_net(config), make_optimizer(config)
    opt_state, root = optimizer.init(params), jax.random.key(seed)
    n, batch = task.graph.n_nodes, config.samples_per_update
    for u in range(updates):
        if meter().exhausted() or meter().calls_left() < batch + 1:
            break
        acts, logp, greedy = (np.asarray(a) for a in sample_batch(net, params, task.inputs, jax.random.fold_in(root, u),
                                                                  batch, config.temperature))
        rows = np.concatenate([acts[:, :n], greedy[None, :n]])
        obj = score_batch(task.graph, rows, task.cluster, config.memory_penalty_per_gb)
        if obj.min() < best:
            best_p, best = rows[int(np.argmin(obj))].copy(), float(obj.min())
        r = ppo_step(net, config, optimizer, params, opt_state, task, None, Drawn(acts, logp, obj[:batch]))
        params, opt_state = r.params, r.opt_state
    return params, best_p, best
