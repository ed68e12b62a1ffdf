"""Train rnn or hierarchical in a run directory that survives a kill.

One update = one REINFORCE step (placeto.methods.sequence.reinforce) on the run's (graph, cluster), with the key
fold_in(key(seed), update): a run resumed from its checkpoint continues exactly as an uninterrupted run would,
so equal seeds give byte-equal checkpoints, killed or not. With `workers`
(placeto.rollouts.distributed.WorkerSpec) the placements are sampled and simulated in Ray actors, one key per
sample (reinforce.draw_range): equal seeds give equal checkpoints for every number of workers (not those of a
run without).

Run directory (as Placeto's and GDP's):

    config.json         the method's config, with "method": "rnn" or "hierarchical"
    checkpoint.msgpack  params, Adam state, baseline, counters, best objective and the task (graph name, ops,
                        devices) it trains on; written atomically after the first update, every
                        `checkpoint_seconds` and at the end
    metrics.csv         one row per update (rows after the checkpoint are dropped on resume)
    tb/                 TensorBoard scalars (tensorboardX)
    best/<task>.json    the best placement sampled so far (objective: placeto.objective)
    .lock               held while a `train` writes the directory (placeto.checkpoint_io.RunLock)
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import jax
import numpy as np
from flax import serialization
from tqdm import tqdm

from placeto.checkpoint_io import (CHECKPOINT, CONFIG, RunLock, check_finite, counter, objective, read_blob,
                                  restore, stopped)
from placeto.rollouts.distributed import WorkerSpec, open_pool
from placeto.methods.sequence.pergraph import PER_GRAPH, MethodSpec, PerGraphConfig
from placeto.methods.sequence.specs import get_spec
from placeto.methods.sequence.reinforce import (Baseline, Drawn, concat_drawn, draw_range, init_params, make_optimizer,
                                               reinforce_step)
from placeto.metrics_log import METRICS, Appender, resumed_rows
from placeto.objective import metered, record
from placeto.tensorboard_log import ScalarWriter
from placeto.progress import advance, ms
from placeto.rollouts.workers import Pair, from_key_data, key_data
from simulator.model.cluster import Cluster, cluster_preset
from simulator.model.generate import layered_dag
from simulator.model.errors import InputError
from simulator.model.limits import number, short_repr
from simulator.model.graph import Graph
from simulator.model.io import PathLike, atomic_write_bytes, check_output_path, read_json
from simulator.model.placement_file import save_placement

FIELDS = ("update", "samples", "seconds", "loss", "entropy", "mean_reward", "baseline", "mean_objective_us",
          "batch_best_us", "best_us", "oom_fraction", "sim_calls_per_s")
BLOB_KEYS = ("params", "opt_state", "baseline", "update", "samples", "best", "task")


class RunState(NamedTuple):
    """Everything a checkpoint holds."""

    params: Any
    opt_state: Any
    baseline: Baseline
    update: int
    samples: int  # placements sampled and simulated so far
    best: float  # best objective so far, microseconds (inf before the first update)


class TrainSummary(NamedTuple):
    """What a `train` call did.

    Objectives are feasibility-first objectives (placeto.objective) in microseconds.
    """

    task: str  # "<graph>@<D>d"
    updates: int  # update counter at the end (resumed runs included)
    samples: int
    start_update: int  # update counter when this call started
    wall_seconds: float  # of this call, compilation included
    sim_calls_per_second: float
    best_objective: float
    best_file: str  # best/<task>.json


def task_key(graph: Graph, cluster: Cluster) -> str:
    return f"{graph.name}@{cluster.n_devices}d"


def best_file(out: Path, key: str) -> Path:
    return out / "best" / f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', key)}.json"


def _task(graph: Graph, cluster: Cluster) -> dict[str, Any]:
    return {"graph": graph.name, "nodes": graph.n_nodes, "devices": cluster.n_devices}


def _save(out: Path, st: RunState, task: dict[str, Any]) -> None:
    blob = {"params": serialization.to_state_dict(st.params), "opt_state": serialization.to_state_dict(st.opt_state),
            "baseline": {"value": float(st.baseline.value), "count": int(st.baseline.count)},
            "update": st.update, "samples": st.samples, "best": float(st.best), "task": task}
    atomic_write_bytes(out / CHECKPOINT, serialization.msgpack_serialize(blob))


def stored_task(blob: Mapping[str, Any], path: PathLike) -> dict[str, Any]:
    """A checkpoint's task {graph: name, nodes: count, devices: count}.

    Raises:
      InputError: naming `path`, if the task is missing or malformed.
    """
    stored = blob["task"]
    if not isinstance(stored, Mapping) or set(stored) != {"graph", "nodes", "devices"} or \
            not isinstance(stored["graph"], str) or \
            not all(type(stored[k]) is int and 0 <= stored[k] <= 2**31 for k in ("nodes", "devices")):
        raise InputError(f"field 'task': expected a map {{graph: name, nodes: count, devices: count}}, got "
                         f"{short_repr(stored, 120)}", str(path))
    return dict(stored)


def _load(out: Path, template: RunState, task: dict[str, Any]) -> RunState | None:
    """The checkpoint restored into `template` (None without one).

    Raises:
      InputError: if it is of another task or model.
    """
    path = out / CHECKPOINT
    if not path.exists():
        return None
    blob = read_blob(path, BLOB_KEYS)
    stored = stored_task(blob, path)
    if stored != task:
        raise InputError(f"the run trains on {short_repr(stored, 200)}, not {task}: per-graph policies resume on "
                         f"their own graph and device count; pass --fresh or another --out", str(path))
    baseline = blob["baseline"]
    if not isinstance(baseline, Mapping) or "value" not in baseline or "count" not in baseline:
        raise InputError("field 'baseline': expected a map {value, count}", str(path))
    try:
        value = number(baseline["value"], "field 'baseline': value", -math.inf)
    except InputError as e:
        raise e.with_source(str(path)) from None
    base = Baseline(value, counter(baseline, "count", path))
    counters = counter(blob, "update", path), counter(blob, "samples", path), objective(blob["best"], "field 'best'",
                                                                                          path)
    return RunState(restore(template.params, blob["params"], "params", path),
                    restore(template.opt_state, blob["opt_state"], "opt_state", path), base, *counters)


def check_config(out: Path, config: PerGraphConfig) -> None:
    """InputError unless config.json (if any) is of this method and model."""
    if not (out / CONFIG).exists():
        return
    d = read_json(out / CONFIG)
    try:
        old = type(config).from_dict(d if isinstance(d, dict) else {})
    except (TypeError, ValueError) as e:
        raise InputError(f"not a run directory of {config.METHOD} ({e}); pass --fresh or another --out",
                         str(out / CONFIG)) from None
    if old.model_fields() != config.model_fields():
        raise InputError(f"the run was trained with model fields {old.model_fields()}, not {config.model_fields()}: "
                         f"resume with the same model config, or pass --fresh", str(out / CONFIG))


class MetricsLog:
    """A run's logs: metrics.csv, TensorBoard scalars, a tqdm bar.

    On resume, the rows of updates >= the resumed checkpoint's are dropped from metrics.csv.
    """

    def __init__(self, out: Path, keep_until: int, total: int, initial: int, progress: bool):
        path = out / METRICS
        table = resumed_rows(out, lambda update: update < keep_until) if keep_until > 0 else None
        rows = [dict(zip(table.header, r)) for r in table.rows] if table else []
        buf = io.StringIO()
        w = csv.DictWriter(buf, FIELDS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        atomic_write_bytes(path, buf.getvalue().encode())
        self.csv = Appender(path, FIELDS)
        self.tb_dir = out / "tb"
        self.tb = ScalarWriter(self.tb_dir)
        self.bar = tqdm(total=total, initial=initial, unit="placement", disable=not progress, dynamic_ncols=True)
        self.bar.set_postfix_str("compiling the first update", refresh=True)  # until then the bar shows nothing

    def row(self, metrics: dict[str, Any], step: int) -> None:
        self.csv.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in metrics.items()})
        self.tb.add({k: v for k, v in metrics.items() if isinstance(v, float)}, step)

    def flush(self) -> None:
        self.csv.flush()
        self.tb.flush()

    def close(self) -> None:
        self.csv.close()
        self.tb.close()
        self.bar.close()


def train(config: PerGraphConfig, graph: Graph, cluster: Cluster, out: PathLike, resume: bool = True,
          progress: bool = False, workers: WorkerSpec | None = None) -> TrainSummary:
    """Train (or resume) a per-graph policy in run directory `out`.

    `config.METHOD`'s policy, for `graph` on `cluster`; see the module docstring.

    Args:
      resume: continue the run in `out`, if any (False: start afresh).
      workers: sample and simulate on Ray (see the module docstring).

    Raises:
      InputError: if config.devices is not the cluster's device count, or if `out` holds a run of another
        method, model or task (unless resume is False).
    """
    if config.devices != cluster.n_devices:
        raise InputError(f"{config.METHOD}: config devices={config.devices} but the cluster has "
                         f"{cluster.n_devices} devices (a per-graph policy is trained for one device count)")
    out = Path(out)
    check_output_path(out, directory=True)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        return _train_locked(get_spec(config.METHOD), config, graph, cluster, out, resume, progress, workers)


def _draw_on(pool, config: PerGraphConfig, params, key: jax.Array) -> Drawn:
    """An update's samples, drawn across the pool's workers.

    By reinforce.draw_range; counted by this process's meter.
    """
    drawn = concat_drawn(pool.run(params, (key_data(key),), config.samples_per_update))
    record(drawn.scores.objective)
    return drawn


def _train_locked(spec: MethodSpec, config: PerGraphConfig, graph: Graph, cluster: Cluster, out: Path,
                  resume: bool, progress: bool, workers: WorkerSpec | None = None) -> TrainSummary:
    t0 = time.perf_counter()
    task, key = _task(graph, cluster), task_key(graph, cluster)
    if resume:
        check_config(out, config)
        if (out / CHECKPOINT).exists():
            read_blob(out / CHECKPOINT, BLOB_KEYS)  # fail fast on a broken checkpoint, before compiling anything
    inputs, net = spec.make_inputs(graph, cluster, config), spec.make_net(config)
    params = init_params(net, inputs, config.seed)
    st = RunState(params, make_optimizer(float(config.grad_clip), float(config.lr)).init(params), Baseline(0.0, 0),
                  0, 0, math.inf)
    st = (_load(out, st, task) if resume else None) or st
    atomic_write_bytes(out / CONFIG, config.to_json().encode())
    (out / "best").mkdir(exist_ok=True)
    start, saved, last_save = st.update, None, -math.inf
    log = MetricsLog(out, st.update, config.updates * config.samples_per_update, st.samples, progress)
    deadline = t0 + 60 * config.time_limit_minutes if config.time_limit_minutes > 0 else math.inf
    root = jax.random.key(config.seed)
    try:
        with metered() as m, open_pool(workers, WORKER, config, [(graph, cluster)]) as pool:
            while st.update < config.updates and time.perf_counter() < deadline:
                k_update = jax.random.fold_in(root, st.update)
                drawn = None if pool is None else _draw_on(pool, config, st.params, k_update)
                r = reinforce_step(net, config, st.params, st.opt_state, st.baseline, inputs, graph, cluster,
                                   k_update, drawn)
                check_finite(r.params, r.loss, out, st.update, saved)
                if r.best_objective < st.best:
                    save_placement(best_file(out, key), r.best_placement, cluster.device_names, graph=graph,
                                   cluster=cluster)
                st = RunState(r.params, r.opt_state, r.baseline, st.update + 1,
                              st.samples + config.samples_per_update, min(st.best, r.best_objective))
                log.row({"update": st.update - 1, "samples": st.samples, "seconds": time.perf_counter() - t0,
                         "loss": r.loss, "entropy": r.entropy, "mean_reward": r.mean_reward,
                         "baseline": float(r.baseline.value), "mean_objective_us": r.mean_objective,
                         "batch_best_us": r.best_objective, "best_us": st.best, "oom_fraction": r.oom_fraction,
                         "sim_calls_per_s": m.calls / max(m.elapsed(), 1e-9)}, st.samples)
                advance(log.bar, config.samples_per_update, first=st.update == start + 1)  # the 1st compiles
                log.bar.set_postfix(best=ms(st.best), batch=ms(r.mean_objective))
                if saved is None or time.perf_counter() - last_save >= config.checkpoint_seconds:
                    log.flush()
                    _save(out, st, task)
                    saved, last_save = st.update, time.perf_counter()
            if saved != st.update:
                log.flush()
                _save(out, st, task)
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM (simulator.interrupts): st is the last complete update's state
        log.flush()
        raise stopped(e, lambda: _save(out, st, task), st.samples, config.updates * config.samples_per_update,
                      "placements", out / CHECKPOINT) from None
    finally:
        log.close()
    wall = time.perf_counter() - t0
    return TrainSummary(key, st.update, st.samples, start, wall, m.calls / max(wall, 1e-9), st.best,
                        str(best_file(out, key)))


# ---- reading a run back ---------------------------------------------------------------------------------------
def run_method(run_dir: PathLike | None) -> str | None:
    """"rnn" or "hierarchical" for a per-graph run directory, else None.

    Read from config.json's "method".
    """
    if run_dir is None:
        return None
    path = Path(str(run_dir)) / CONFIG
    if not path.is_file():
        return None
    try:
        d = read_json(path)
    except InputError:
        return None
    method = d.get("method") if isinstance(d, dict) else None
    return method if isinstance(method, str) and method in PER_GRAPH else None


def load_run(run_dir: PathLike) -> tuple[PerGraphConfig, Any, dict[str, Any]]:
    """(config, params, task) of a per-graph run directory.

    The parameter template comes from jax.eval_shape (nothing is compiled).

    Raises:
      InputError: naming the file, if it is not a readable run directory.
    """
    run_dir = Path(str(run_dir))
    method = run_method(run_dir)
    if method is None:
        raise InputError("not an rnn or hierarchical run directory (config.json's \"method\")", str(run_dir))
    spec = get_spec(method)
    d = read_json(run_dir / CONFIG)
    try:
        config = spec.config_cls.from_dict(d)
    except (TypeError, ValueError) as e:
        raise InputError(str(e), str(run_dir / CONFIG)) from None
    probe = spec.make_inputs(layered_dag(8, seed=0), cluster_preset("placeto-k80", config.devices), config)
    net = spec.make_net(config)
    shapes = jax.eval_shape(lambda: net.init(jax.random.key(0), probe, jax.random.key(0), 1, False,
                                             method="sample"))
    template = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    path = run_dir / CHECKPOINT
    blob = read_blob(path, ("params", "task"))
    task = stored_task(blob, path)
    return config, restore(template, blob["params"], "params", path), task


def load_params(run_dir: PathLike) -> tuple[PerGraphConfig, Any]:
    """(config, params) of a per-graph run: Method.load of rnn, hierarchical.

    It is `load_run` without the task.
    """
    config, params, _ = load_run(run_dir)
    return config, params


# the per-graph methods' worker kind (placeto.rollouts.workers.make_worker)
WORKER = "placeto.methods.sequence.rundir:PerGraphWorker"


class PerGraphWorker:
    """A Ray worker of rnn / hierarchical placements of one graph.

    Payload: (config, [(graph, cluster)]).
    """

    def __init__(self, config, pairs: Sequence[Pair]):
        spec = get_spec(config.METHOD)
        (self.graph, self.cluster), = pairs
        self.config, self.net = config, spec.make_net(config)
        self.inputs = spec.make_inputs(self.graph, self.cluster, config)

    def run(self, params, key: np.ndarray, lo: int, hi: int):
        """reinforce.Drawn of samples [lo, hi) of an update."""
        return draw_range(self.net, self.config, params, self.inputs, self.graph, self.cluster, from_key_data(key),
                          lo, hi)
