"""Placing with rnn or hierarchical: from a run, or trained in a budget.

From its run directory, or trained from scratch inside a budget (the compare rows "rnn" and "hierarchical").
Both run inside one meter (placeto.objective.metered) that counts every simulation and holds the budget; the
one-time jit compilation (of `sample` and of the update) happens before it and is reported apart, as for the
other learned methods.

    train_in_budget   fresh parameters from the seed, REINFORCE updates while a whole batch of
                      samples_per_update simulations fits in the calls left and (as far as the last update's
                      duration tells) in the seconds left; the best placement any update sampled
    place_from_run    the run's saved best placement, the greedy decode and sampled batches while the budget
                      lasts; the run must have been trained on this graph and device count
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
from placeto.compile_time import excluded
from placeto.methods.sequence.pergraph import PerGraphConfig
from placeto.methods.sequence.specs import get_spec
from placeto.methods.sequence.reinforce import Baseline, init_params, make_optimizer, reinforce_step, sample, update
from placeto.methods.sequence.rundir import best_file, load_run, task_key
from placeto.objective import meter, metered, score_batch
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import PathLike
from simulator.model.placement_file import load_placement

COMPARE_PRESET = "default"  # the config preset train_in_budget starts from when none is given (tests: "tiny")


def run_pergraph(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
                 seconds: float | None = None, checkpoint: PathLike | None = None,
                 config: PerGraphConfig | None = None) -> tuple[MethodRun, float]:
    """(MethodRun, compile seconds) of per-graph method `name`.

    From run directory `checkpoint` if given, else trained from scratch with `config` (default: the method's
    default config) within the budget.
    """
    if checkpoint is not None:
        return place_from_run(checkpoint, graph, cluster, seed, budget, seconds, expect=name)
    return train_in_budget(name, graph, cluster, seed, budget, seconds, config)


def run_method(variant: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
               seconds: float | None = None, checkpoint: PathLike | None = None,
               finetune_episodes: int = 0) -> tuple[MethodRun, float]:
    """Method.run of rnn and hierarchical: `run_pergraph`.

    A placeto.methods.base.RunFn; `finetune_episodes` does not apply: a per-graph policy is trained longer instead
    (Method.finetunes False).
    """
    del finetune_episodes
    return run_pergraph(variant, graph, cluster, seed, budget, seconds, checkpoint)


def _compile(net, inputs, params, batch: int, greedy: bool, with_update: bool, config) -> None:
    """Compile `sample` (and the update) outside any meter.

    For these shapes; nothing is simulated.
    """
    drawn = sample(net, params, inputs, jax.random.key(0), batch, greedy)
    if with_update:
        optimizer = make_optimizer(float(config.grad_clip), float(config.lr))
        jax.block_until_ready(update(net, optimizer, params, optimizer.init(params), inputs, drawn.actions,
                                     jnp.zeros(batch, jnp.float32), jnp.float32(config.entropy)))
    jax.block_until_ready(drawn)


def train_in_budget(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
                    seconds: float | None = None, config: PerGraphConfig | None = None) -> tuple[MethodRun, float]:
    """Train from scratch inside the budget (see the module docstring).

    A call budget smaller than a batch shrinks the batch to it.
    """
    spec = get_spec(name)
    if budget is None and seconds is None:
        raise InputError(f"{name} trains from scratch on the graph: give it a budget of simulator calls or seconds")
    t0 = time.perf_counter()
    config = (config or spec.presets[COMPARE_PRESET]()).replace(devices=cluster.n_devices, seed=seed)
    if budget is not None and budget < config.samples_per_update:
        config = config.replace(samples_per_update=max(1, int(budget)))
    inputs, net = spec.make_inputs(graph, cluster, config), spec.make_net(config)
    params = init_params(net, inputs, seed)
    _compile(net, inputs, params, config.samples_per_update, False, True, config)
    _compile(net, inputs, params, 1, True, False, config)
    compile_s = time.perf_counter() - t0
    opt_state = make_optimizer(float(config.grad_clip), float(config.lr)).init(params)
    baseline, root, u = Baseline(0.0, 0), jax.random.key(seed), 0
    best, best_score, last = None, math.inf, 0.0
    with metered(max_calls=math.inf if budget is None else budget, seconds=seconds) as m, excluded(m) as jit:
        while (not m.exhausted() and m.calls_left() >= config.samples_per_update
               and m.seconds_left() > last):
            t1 = time.perf_counter()
            r = reinforce_step(net, config, params, opt_state, baseline, inputs, graph, cluster,
                               jax.random.fold_in(root, u))
            params, opt_state, baseline, u = r.params, r.opt_state, r.baseline, u + 1
            if r.best_objective < best_score:
                best, best_score = r.best_placement, r.best_objective
            last = time.perf_counter() - t1
        if best is None:  # not one batch fitted: the untrained policy's greedy placement, unsimulated
            best = np.asarray(sample(net, params, inputs, jax.random.key(0), 1, True).placement)[0, :graph.n_nodes]
        elapsed = m.elapsed() - jit.seconds
    return MethodRun(np.asarray(best, np.int32), m.calls, elapsed, tuple(m.trace), jit.seconds), compile_s + jit.seconds


def place_from_run(run_dir: PathLike, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
                   seconds: float | None = None, expect: str | None = None) -> tuple[MethodRun, float]:
    """Place from a trained run (see the module docstring).

    Raises:
      InputError: if the run is of another method than `expect`, another graph or device count.
    """
    t0 = time.perf_counter()
    config, params, task = load_run(run_dir)
    _check_task(config, task, graph, cluster, run_dir, expect)
    spec = get_spec(config.METHOD)
    inputs, net = spec.make_inputs(graph, cluster, config), spec.make_net(config)
    batch = config.samples_per_update
    _compile(net, inputs, params, 1, True, False, config)
    _compile(net, inputs, params, batch, False, False, config)
    compile_s = time.perf_counter() - t0
    n = graph.n_nodes
    with metered(max_calls=math.inf if budget is None else budget, seconds=seconds) as m, excluded(m) as jit:
        cands = [np.asarray(sample(net, params, inputs, jax.random.key(seed), 1, True).placement)[0, :n]]
        saved = best_file(Path(str(run_dir)), task_key(graph, cluster))
        if saved.is_file():
            cands.insert(0, load_placement(saved, graph, cluster.n_devices).assignment)
        cands = cands[:max(1, int(min(len(cands), m.calls_left())))]
        scores = score_batch(graph, np.stack(cands), cluster)
        best, best_score = cands[int(np.argmin(scores))], float(scores.min())
        key = jax.random.key(seed)
        unbudgeted = budget is None and seconds is None  # then the saved and greedy placements only
        while not unbudgeted and not meter().exhausted() and m.calls_left() >= 1:
            key = jax.random.fold_in(key, m.calls)
            rows = np.asarray(sample(net, params, inputs, key, batch).placement)[:int(min(batch, m.calls_left())), :n]
            obj = score_batch(graph, rows, cluster)
            if obj.min() < best_score:
                best, best_score = rows[int(np.argmin(obj))], float(obj.min())
        elapsed = m.elapsed() - jit.seconds
    return MethodRun(np.asarray(best, np.int32), m.calls, elapsed, tuple(m.trace), jit.seconds), compile_s + jit.seconds


def _check_task(config: PerGraphConfig, task: dict[str, Any], graph: Graph, cluster: Cluster, run_dir: PathLike,
                expect: str | None) -> None:
    if expect is not None and config.METHOD != expect:
        raise InputError(f"--method {expect} needs a run directory of {expect}, this is one of {config.METHOD}",
                         str(run_dir))
    if (task["graph"], task["nodes"]) != (graph.name, graph.n_nodes) or task["devices"] != cluster.n_devices:
        raise InputError(f"{config.METHOD} policies place the graph they were trained on: {task['graph']} "
                         f"({task['nodes']} nodes) on {task['devices']} devices, not {graph.name} ({graph.n_nodes} "
                         f"nodes) on {cluster.n_devices}", str(run_dir))
