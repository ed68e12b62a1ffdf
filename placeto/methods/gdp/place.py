"""Placing with a gdp policy: zero-shot, sampled, or fine-tuned.

Zero-shot is one forward pass. Coarse-to-fine (GdpConfig.coarse_groups): `placing_task` groups a large,
communication-bound graph first; the one pass places the groups, expanded to the ops. The modes that simulate
(`run_gdp`) decode both views greedily, the groups and the op graph itself, score both on the op graph (two
simulator calls) and spend the rest of their budget (fine-tuning, samples, search) on the better view; every
placement is scored on the op graph, and the grouping's wall time is part of the placing time.

`run_gdp` is the compare row "gdp" (placeto.harness.compare.run_learned dispatches to it): the policy is loaded
and its functions compiled outside the meter (reported as compile seconds); inside it, optional PPO fine-tuning
on the graph, then the greedy placement and, while the call budget allows, batches of sampled placements; the
best objective wins.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from placeto.baselines import MethodRun
from placeto.baselines.common import NotApplicable
from placeto.baselines.single import or_single, single
from placeto.feasibility import or_fitting
from placeto.checkpoint_io import CHECKPOINT, CONFIG, param_template, read_blob, restore
from placeto.coarsen import for_policy
from placeto.compile_time import excluded
from placeto.methods.base import default_for
from placeto.methods.gdp.config import DEFAULT_CHECKPOINT, LARGE_CHECKPOINT, NAME, FinetuneSettings, GdpConfig
from placeto.methods.gdp.decoder import decode
from placeto.methods.gdp.model import log_policy, make_net, sample
from placeto.methods.gdp.ppo import (Drawn, Task, decoder_heads, decoder_uniforms, draw, greedy_decoding,
                                     init_params, make_optimizer, make_task, ppo_step, sample_batch)
from placeto.methods.prior import search_from_prior
from placeto.objective import meter, metered, score_batch
from placeto.policies import resolve_checkpoint
from simulator.model.cluster import Cluster, cluster_preset
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.graph import Graph
from simulator.model.io import PathLike, read_json
from simulator.model.stats import communication_ratio


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
    """True if a shipped policy name or run directory is a gdp one.

    False for None or anything unresolvable.
    """
    if name_or_dir is None:
        return False
    try:
        return is_gdp_run(resolve_checkpoint(name_or_dir))
    except InputError:
        return False


def load_config(run_dir: PathLike) -> GdpConfig:
    """The config of a gdp run directory.

    Raises:
      InputError: naming the file, if it is not a readable one.
    """
    path = Path(str(run_dir)) / CONFIG
    d = read_json(path)
    try:
        return GdpConfig.from_dict(d if isinstance(d, dict) else {})
    except (TypeError, ValueError) as e:
        raise InputError(str(e), str(path)) from None


def load_run(run_dir: PathLike) -> tuple[GdpConfig, Any]:
    """(config, params) of a gdp run directory.

    Raises:
      InputError: naming the file, if it is not a readable one.
    """
    run_dir = Path(str(run_dir))
    config = load_config(run_dir)
    probe = make_task(layered_dag(8, seed=0), cluster_preset("placeto-k80", min(2, config.max_devices)), config)
    path = run_dir / CHECKPOINT
    template = param_template(lambda: init_params(config, probe))
    return config, restore(template, read_blob(path)["params"], "params", path)


def coarse_view(graph: Graph, cluster: Cluster, config: GdpConfig) -> bool:
    """True if `config` places `graph` coarse-to-fine on `cluster`.

    That is, with more than coarse_groups nodes and a communication-to-computation ratio above coarse_ccr
    (GdpConfig.coarse_groups).
    """
    return 0 < config.coarse_groups < graph.n_nodes and communication_ratio(graph, cluster) > config.coarse_ccr


def coarse_note(graph: Graph, cluster: Cluster, checkpoint: PathLike, simulating: bool) -> str | None:
    """A line on how `checkpoint` placed `graph` coarse-to-fine, or None.

    None if it did not (or `checkpoint` is no gdp policy). `simulating`: both views were scored (run_gdp with more
    than one call).
    """
    if not is_gdp_checkpoint(checkpoint):
        return None
    config = load_config(resolve_checkpoint(checkpoint))
    if not coarse_view(graph, cluster, config):
        return None
    how = ("decoded as its groups and as ops, the budget spent on the better" if simulating
           else "placed as its groups, then expanded")
    return (f"{graph.n_nodes} nodes, communication/computation {communication_ratio(graph, cluster):.1f} > "
            f"{config.coarse_ccr:g}: coarse-to-fine through {config.coarse_groups} groups, {how}")


def placing_task(graph: Graph, cluster: Cluster, config: GdpConfig) -> tuple[Task, float]:
    """(the task placing `graph`, the wall seconds spent grouping).

    `graph`'s own task, or with `coarse_view`, that of its grouping to config.coarse_groups groups
    (placeto.coarsen.for_policy), whose placements are expanded to `graph`'s ops and scored there.
    """
    if not coarse_view(graph, cluster, config):
        return make_task(graph, cluster, config), 0.0
    view = for_policy(graph, config.coarse_groups, config.coarse_groups)
    return make_task(graph, cluster, config, view.grouping), view.seconds


def greedy_placement(config: GdpConfig, params: Any, graph: Graph, cluster: Cluster) -> np.ndarray:
    """int32[N] each node on its most likely device; no simulation.

    One forward pass. With a list decoder, its greedy decoding (each node on its most likely device given those
    chosen before it);
    over capacity, the best of it and the memory-aware list schedules (`placeto.feasibility.or_fitting`); then with
    config.keep_single, two simulations (`placeto.baselines.single.or_single`). Coarse-to-fine where
    `coarse_view` says so: the groups' greedy placement, expanded to the ops.
    """
    if cluster.n_devices > config.max_devices:
        raise NotApplicable(f"the gdp policy places on at most {config.max_devices} devices (max_devices), the "
                            f"cluster has {cluster.n_devices}")
    task, _ = placing_task(graph, cluster, config)
    if config.decoder != "independent":
        placement = task.op_placements(greedy_decoding(config, make_net(config), params, task).acts[0])
    else:
        _, greedy = _sample(make_net(config), params, task.inputs, jax.random.key(0), 1)
        placement = task.op_placements(np.asarray(greedy)[:task.graph.n_nodes])
    placement = or_fitting(graph, cluster, placement)  # over capacity: a memory-aware list schedule's, where one fits
    return or_single(graph, cluster, placement) if config.keep_single else placement


def timed_greedy(config: GdpConfig, params: Any, graph: Graph, cluster: Cluster) -> tuple[np.ndarray, float, float]:
    """`greedy_placement`, timed: (placement int32[N], seconds, first seconds).

    The seconds after compilation, and the first call's seconds (compilation included). For experiments that report
    the zero-shot time apart from the one-time compilation.
    """
    t0 = time.perf_counter()
    greedy_placement(config, params, graph, cluster)
    t1 = time.perf_counter()
    placement = greedy_placement(config, params, graph, cluster)
    return placement, time.perf_counter() - t1, t1 - t0


_sample = jax.jit(sample, static_argnames=("net", "batch"))
def _warm_decoder(order: str) -> None:
    """Compile (or load) the list decoder's kernel, outside any meter.

    On a tiny graph.
    """
    g = layered_dag(8, seed=0)
    decode(g, cluster_preset("placeto-k80", 2), np.zeros((g.n_nodes, 2)), np.ones((g.n_nodes, 2)), 1.0, None, order)


def run_gdp(graph: Graph, cluster: Cluster, checkpoint: PathLike, seed: int = 0, budget: float | None = None,
            seconds: float | None = None, finetune_episodes: int = 0, search: bool = False,
            tune: FinetuneSettings | None = None) -> tuple[MethodRun, float]:
    """(MethodRun, compile seconds) of the "gdp" and "gdp-search" rows.

    See the module docstring.

    `finetune_episodes` sampled placements of PPO fine-tuning first (`tune`'s settings, default
    FinetuneSettings.default_for the policy; charged to the budget, its compilation is not). `search` (method
    gdp-search): after the greedy placement, the policy's per-node device distributions are the prior of
    placeto-search's annealing (`placeto.methods.prior.search_from_prior`) for the rest of the budget, instead of
    sampled placements. Coarse-to-fine where `coarse_view` says so: the better of the two views' greedy placements
    decides where the budget goes (module docstring); the grouping's seconds are charged to the time budget and
    counted in the run's seconds.
    """
    t0 = time.perf_counter()
    config, params = load_run(resolve_checkpoint(checkpoint))
    if cluster.n_devices > config.max_devices:
        raise NotApplicable(f"the gdp policy places on at most {config.max_devices} devices (max_devices), the "
                            f"cluster has {cluster.n_devices}", str(checkpoint))
    net, (task, group_s) = make_net(config), placing_task(graph, cluster, config)
    views = [task] if task.ops is None else [task, make_task(graph, cluster, config)]  # the groups, the ops
    tuning = (tune or FinetuneSettings.default_for(config)).apply(config)
    if config.decoder != "independent":  # compile, unmetered
        _warm_decoder(config.decoder)
    with metered():  # loads (or compiles) the simulator; this call is charged to no one
        score_batch(graph, np.zeros((1, graph.n_nodes), np.int32), cluster)
    for view in views:  # the network (and the PPO update) compiled for each view's shapes, unmetered
        if config.decoder != "independent":
            jax.block_until_ready(decoder_heads(net, params, view.inputs))
            for k in _batch_sizes(config.samples_per_update):  # the decoders' uniforms, greedy (k = 1) and sampled
                jax.block_until_ready(decoder_uniforms(jax.random.key(0), jnp.zeros(k, jnp.uint32),
                                                       view.graph.n_nodes))
        elif search:
            jax.block_until_ready(_log_policy(net, params, view.inputs))
        else:
            jax.block_until_ready(_sample(net, params, view.inputs, jax.random.key(0), config.samples_per_update))
        if finetune_episodes > 0:
            with metered():  # charged to no one
                finetune(tuning, params, view, seed, 1)
    compile_s = time.perf_counter() - t0 - group_s
    calls = math.inf if budget is None else budget
    with metered(max_calls=calls, seconds=None if seconds is None else max(seconds - group_s, 0.0)) as m, \
            excluded(m) as jit:  # a compilation met inside moves the deadline, reported with the compile seconds
        task = _better_view(config, net, params, views)
        # the greedy placement's own check (greedy_placement), where the budget pays for it and the greedy one
        extra = [_single(config, task)] if config.keep_single and m.calls_left() >= 2 else []
        updates = -(-finetune_episodes // tuning.samples_per_update)
        params, seen_p, seen = finetune(tuning, params, task, seed, updates)
        extra += [] if seen_p is None else [(seen_p, seen)]  # the best placement sampled while fine-tuning
        if search:
            best_p = _search(net, params, task, seed, calls, extra)
        else:
            best_p = task.op_placements(_sampled(config, net, params, task, seed, extra))
        best_p = or_fitting(graph, cluster, best_p)  # over capacity: a memory-aware list schedule's, where one fits
        elapsed = m.elapsed() - jit.seconds
    trace = tuple((t + group_s, c, b) for t, c, b in m.trace)  # (seconds, calls, best), grouping first
    return MethodRun(best_p.astype(np.int32), m.calls, elapsed + group_s, trace, jit.seconds), compile_s + jit.seconds


def run_variant(variant: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
                seconds: float | None = None, checkpoint: PathLike | None = None,
                finetune_episodes: int = 0) -> tuple[MethodRun, float]:
    """gdp's Method.run: row `variant` by `run_gdp`.

    `variant`: "gdp" or "gdp-search"; a placeto.methods.base.RunFn.
    """
    return run_gdp(graph, cluster, checkpoint, seed, budget, seconds, finetune_episodes, variant == "gdp-search")


def placing_note(graph: Graph, cluster: Cluster, checkpoint: PathLike, calls: int) -> str | None:
    """gdp's Method.note: `coarse_note`.

    Both views were scored when the placement took more than one call.
    """
    return coarse_note(graph, cluster, checkpoint, simulating=calls > 1)


def greedy_calls(checkpoint: PathLike | None, graph: Graph) -> int:
    """gdp's Method.greedy_calls: `zero_shot_calls` of its policy.

    Of `checkpoint` if it is a gdp policy, else of the shipped one gdp places `graph` with.
    """
    if not is_gdp_checkpoint(checkpoint):
        checkpoint = default_for(graph.n_nodes, DEFAULT_CHECKPOINT, LARGE_CHECKPOINT)
    return zero_shot_calls(checkpoint)


def _batch_sizes(samples_per_update: int) -> list[int]:
    """The sampled batch sizes `_sampled_decodings` uses.

    Powers of two up to samples_per_update, and it: a budget's last, smaller batches compile nothing new
    (`run_gdp` compiles them all first).
    """
    sizes = {1 << i for i in range(max(1, samples_per_update).bit_length()) if 1 << i <= samples_per_update}
    return sorted(sizes | {max(1, samples_per_update)})


def _single(config: GdpConfig, task: Task) -> tuple[np.ndarray, float]:
    """(single-device placement int32[N], its objective on the op graph).

    The placement of task.graph; one metered call.
    """
    p = np.asarray(single(task.graph, task.cluster), np.int32)
    return p, float(task.score(p[None])[0])


def zero_shot_calls(checkpoint: PathLike) -> int:
    """Simulator calls of a gdp policy's greedy placement: 1 or 2.

    As run_gdp makes it: 2 where the policy keeps the single device when that is better (config.keep_single).
    `checkpoint`: a gdp run or shipped name.
    """
    return 2 if load_config(resolve_checkpoint(checkpoint)).keep_single else 1


def _better_view(config: GdpConfig, net, params, views: list[Task]) -> Task:
    """The view whose greedy placement scores lower on the op graph.

    A view is a Task of the same op graph: its grouping, or itself. One metered simulation each (ties: the first);
    with one view, or a meter that cannot pay for these calls and one more (the chosen view's own greedy
    placement), the first and no simulation.
    """
    if len(views) == 1 or meter().calls_left() < len(views) + 1:
        return views[0]
    objective = []
    for view in views:
        if config.decoder != "independent":
            greedy = greedy_decoding(config, net, params, view).acts[0]
        else:
            greedy = np.asarray(_sample(net, params, view.inputs, jax.random.key(0), 1)[1])[:view.graph.n_nodes]
        objective.append(float(view.score(greedy[None])[0]))
    return views[int(np.argmin(objective))]


def _sampled(config: GdpConfig, net, params, task, seed: int, extra: list) -> np.ndarray:
    """The gdp method in its meter: greedy, then sampled batches.

    Batches of config.samples_per_update sampled placements while the meter lasts. Returns int32[N] the best of
    them and of `extra` ((placement, objective) pairs).
    """
    n, m = task.graph.n_nodes, meter()
    key = jax.random.key(seed)
    if config.decoder != "independent":
        return _sampled_decodings(config, net, params, task, key, extra)
    draws, greedy = _sample(net, params, task.inputs, key, config.samples_per_update)
    best_p = np.asarray(greedy)[:n]
    best = float(task.score(best_p[None])[0])
    best, best_p = min([(best, best_p), *((o, p) for p, o in extra)], key=lambda c: c[0])
    while not m.exhausted() and m.calls_left() >= 1:
        rows = np.asarray(draws)[:int(min(config.samples_per_update, m.calls_left())), :n]
        obj = task.score(rows)
        if obj.min() < best:
            best, best_p = float(obj.min()), rows[int(np.argmin(obj))]
        key = jax.random.fold_in(key, m.calls)
        draws, _ = _sample(net, params, task.inputs, key, config.samples_per_update)
    return best_p


def _sampled_decodings(config: GdpConfig, net, params, task, key: jax.Array, extra: list) -> np.ndarray:
    """`_sampled` for a list decoder: greedy, then sampled decodings."""
    graph, m = task.graph, meter()
    t0 = time.perf_counter()
    best_p = greedy_decoding(config, net, params, task).acts[0]
    best = float(task.score(best_p[None])[0])
    best, best_p = min([(best, best_p), *((o, p) for p, o in extra)], key=lambda c: c[0])
    # seconds a decoded and simulated sample takes (at first the greedy one's, forward pass included): batches
    # shrink to the time left
    per_sample = time.perf_counter() - t0
    while not m.exhausted() and m.calls_left() >= 1:
        k = int(min(config.samples_per_update, m.calls_left(), m.seconds_left() / max(per_sample, 1e-9)))
        if k < 1:
            break
        k = max(b for b in _batch_sizes(config.samples_per_update) if b <= k)  # a batch size compiled before
        t0 = time.perf_counter()
        drawn = draw(net, config.replace(samples_per_update=k), params, task, jax.random.fold_in(key, m.calls))
        per_sample = (time.perf_counter() - t0) / k
        if drawn.objective.min() < best:
            b = int(np.argmin(drawn.objective))
            best, best_p = float(drawn.objective[b]), drawn.acts[b, :graph.n_nodes].copy()
    return best_p


_log_policy = jax.jit(log_policy, static_argnames=("net",))


def _search(net, params, task, seed: int, limit: float, extra: list) -> np.ndarray:
    """gdp-search: placeto-search's annealing, started and steered by the policy.

    The greedy placement (argmax per node, one simulation) and the prior (float[N, D]: each node's device
    distribution) start and steer the annealing until the meter's count reaches `limit` or it runs out; `extra`:
    more (placement, objective) start candidates, placements of task.graph. Coarse-to-fine: the groups'
    distributions are their ops' and the search runs on the op graph. Returns int32[N ops].
    """
    graph, cluster = task.graph, task.cluster
    d = cluster.n_devices
    if net.config.decoder != "independent":  # each node's distribution at its greedy decision
        dec = greedy_decoding(net.config, net, params, task)
        scores, weight = (np.asarray(a, np.float64) for a in decoder_heads(net, params, task.inputs))
        logits = scores[:graph.n_nodes, :d] + np.einsum("ndk,nk->nd", dec.feat[0], weight[:graph.n_nodes])
        logp = np.where(dec.allowed[0], logits, -np.inf)
    else:
        logp = np.asarray(_log_policy(net, params, task.inputs), np.float64)[:graph.n_nodes, :d]
    prior = np.exp(logp - logp.max(1, keepdims=True))
    prior /= prior.sum(1, keepdims=True)
    greedy = task.op_placements(prior.argmax(1))
    prior = prior if task.op_group is None else prior[task.op_group]
    extra = [(task.op_placements(p), o) for p, o in extra]
    score = float(score_batch(task.op_graph, greedy[None], cluster)[0])
    if meter().exhausted():
        return min([(greedy, score), *extra], key=lambda c: c[1])[0]
    return search_from_prior(task.op_graph, cluster, greedy, score, prior, np.random.default_rng(seed), limit, extra)


def finetune(config: GdpConfig, params: Any, task, seed: int, updates: int) -> tuple[Any, np.ndarray | None, float]:
    """`updates` PPO updates on one task from `params`, fresh Adam.

    With `config`'s batch, epochs and learning rate (run_gdp passes the policy's config with FinetuneSettings
    applied); stops early when the meter's budget cannot pay for another batch, or its time left for another update
    as long as the last one. Each update's forward pass also gives the current greedy placement, simulated with the
    batch (one call more; not learned from).

    Returns (tuned parameters, best placement int32[N] of task.graph sampled or greedy on the way or None, its
    objective in microseconds or inf).
    """
    best_p, best = None, math.inf
    if updates <= 0:
        return params, best_p, best
    net, optimizer = make_net(config), make_optimizer(config)
    opt_state, root = optimizer.init(params), jax.random.key(seed)
    n, batch = task.graph.n_nodes, config.samples_per_update
    last = 0.0  # seconds the last update took: no update is started that the time left cannot pay for
    for u in range(updates):
        if meter().exhausted() or meter().calls_left() < batch + 1 or meter().seconds_left() < last:
            break
        t0 = time.perf_counter()
        if config.decoder != "independent":
            drawn = draw(net, config, params, task, jax.random.fold_in(root, u))
            greedy = greedy_decoding(config, net, params, task).acts[0]
            rows = np.concatenate([drawn.acts[:, :n], greedy[None]])
            obj = np.concatenate([drawn.objective, task.score(greedy[None])])
        else:
            acts, logp, greedy = (np.asarray(a) for a in sample_batch(net, params, task.inputs,
                                                                      jax.random.fold_in(root, u), batch,
                                                                      config.temperature))
            rows = np.concatenate([acts[:, :n], greedy[None, :n]])
            obj = task.score(rows)
            drawn = Drawn(acts, logp, obj[:batch])
        if obj.min() < best:
            best_p, best = rows[int(np.argmin(obj))].copy(), float(obj.min())
        r = ppo_step(net, config, optimizer, params, opt_state, task, None, drawn)
        params, opt_state = r.params, r.opt_state
        last = time.perf_counter() - t0
    return params, best_p, best
