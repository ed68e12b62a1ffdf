"""GDP training: PPO over a family, in a run directory that survives a kill.

The tasks: graphs x device counts. One update = one PPO step (placeto.methods.gdp.ppo) on task `update % T`
(tasks in a fixed order). Its sampling key is fold_in(key(seed), update), so a run resumed from a checkpoint
continues exactly as an uninterrupted run would: equal seeds give equal checkpoints, killed or not. With
`workers` (placeto.rollouts.distributed.WorkerSpec) the placements are sampled and simulated in Ray actors, one
key per sample (ppo.draw_range): equal seeds give equal checkpoints for every number of workers (not those of a
run without).

Run directory (like Placeto's): config.json (GdpConfig with "method": "gdp"), checkpoint.msgpack (params,
optimizer state, counters, best objective per task; written atomically), metrics.csv (one row per update;
rows after the checkpoint are dropped on resume), best/<task>.json (best placement seen per task). A `train`
holds the directory's .lock (placeto.checkpoint_io.RunLock) while it writes it.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax
from flax import serialization

from placeto.checkpoint_io import (CHECKPOINT, CONFIG, RunLock, check_finite, check_resume_devices, counter,
                                  objectives, read_blob, restore, stopped)
from placeto.rollouts.distributed import WorkerSpec, open_pool
from placeto.rollouts.workers import key_data
from placeto.methods.gdp.workers import WORKER
from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.ppo import Drawn, Task, concat_drawn, init_params, make_optimizer, make_task, ppo_step
from placeto.metrics_log import METRICS, Appender, resumed_rows
from placeto.objective import metered, record
from placeto.progress import advance, ms
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import atomic_write_bytes, read_json
from simulator.model.placement_file import save_placement

FIELDS = ("update", "samples", "seconds", "task", "loss", "entropy", "mean_objective_us", "batch_best_us",
          "best_us", "sim_calls_per_s")


class TrainSummary(NamedTuple):
    """What a `train` call did.

    Objectives are feasibility-first objectives (placeto.objective) in microseconds.
    """

    updates: int  # update counter at the end (resumed runs included)
    samples: int  # placements sampled and simulated, resumed runs included
    start_update: int  # update counter when this call started
    sim_calls: int  # simulator calls of this call
    wall_seconds: float  # of this call, compilation included
    sim_calls_per_second: float
    best_objective: dict[str, float]  # task key -> best objective seen


class RunState(NamedTuple):
    """Everything a checkpoint holds."""

    params: Any
    opt_state: Any
    update: int
    samples: int
    best: dict[str, float]  # task key -> best objective, microseconds


def make_tasks(graphs: Sequence[Graph], clusters: Cluster | Sequence[Cluster] | None,
               config: GdpConfig) -> list[Task]:
    """Every graph on every cluster, graph-major.

    clusters None: `graphs` are (graph, cluster) pairs.
    """
    if clusters is None:
        pairs = list(graphs)
    else:
        clusters = [clusters] if isinstance(clusters, Cluster) else list(clusters)
        pairs = [(g, c) for g in graphs for c in clusters]
    if not pairs:
        raise InputError("gdp training needs at least one graph and one cluster")
    for _, c in pairs:
        if c.n_devices > config.max_devices:
            raise InputError(f"cluster {c.name!r} has {c.n_devices} devices; max_devices is {config.max_devices}")
    return [make_task(g, c, config) for g, c in pairs]


def _save(out: Path, st: RunState) -> None:
    blob = {"params": serialization.to_state_dict(st.params), "opt_state": serialization.to_state_dict(st.opt_state),
            "update": st.update, "samples": st.samples, "best": {k: float(v) for k, v in st.best.items()}}
    atomic_write_bytes(out / CHECKPOINT, serialization.msgpack_serialize(blob))


def _read(out: Path) -> tuple[dict, RunState] | None:
    """The checkpoint's blob, counters and best objectives, checked.

    None when there is no checkpoint; params and opt_state are left unrestored (None). Read before the model is built,
    so a damaged checkpoint fails at once.

    Raises:
      InputError: naming the file and the field.
    """
    path = out / CHECKPOINT
    if not path.exists():
        return None
    blob = read_blob(path, ("params", "opt_state", "update", "samples", "best"))
    update, samples = counter(blob, "update", path), counter(blob, "samples", path)
    return blob, RunState(None, None, update, samples, objectives(blob["best"], "field 'best'", path))


def _load(out: Path, template: RunState, read: tuple[dict, RunState] | None = None) -> RunState | None:
    """The checkpoint's state, params restored into `template`.

    params and opt_state are restored into `template`'s structure; the rest comes from `read` if given, else
    `_read` now; None when there is no checkpoint.
    """
    read = read or _read(out)
    if read is None:
        return None
    blob, st = read
    path = out / CHECKPOINT
    return st._replace(params=restore(template.params, blob["params"], "params", path),
                       opt_state=restore(template.opt_state, blob["opt_state"], "opt_state", path))


def _check_config(out: Path, config: GdpConfig) -> None:
    """InputError unless config.json (if any) has these model fields.

    A gdp config with the same model fields.
    """
    if not (out / CONFIG).exists():
        return
    d = read_json(out / CONFIG)
    try:
        old = GdpConfig.from_dict(d if isinstance(d, dict) else {})
    except (TypeError, ValueError) as e:
        raise InputError(f"not a gdp run directory ({e}); pass --fresh or another --out", str(out / CONFIG)) from None
    if old.model_fields() != config.model_fields():
        raise InputError(f"the run was trained with model fields {old.model_fields()}, not {config.model_fields()}: "
                         f"resume with the same model config, or pass --fresh", str(out / CONFIG))


def _metrics_writer(out: Path, keep_until: int):
    """metrics.csv opened for appending.

    Rows of updates >= keep_until are dropped (they were written after the checkpoint).
    """
    path = out / METRICS
    table = resumed_rows(out, lambda update: update < keep_until) if keep_until > 0 else None
    buf = io.StringIO()
    w = csv.DictWriter(buf, FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows([dict(zip(table.header, r)) for r in table.rows] if table else [])
    atomic_write_bytes(path, buf.getvalue().encode())
    appender = Appender(path, FIELDS)
    return appender, appender


def train(config: GdpConfig, graphs: Sequence[Graph], clusters: Cluster | Sequence[Cluster] | None, out: str | Path,
          resume: bool = True, init: Any = None, log=None, workers: WorkerSpec | None = None,
          progress: bool = False) -> TrainSummary:
    """Train (or resume) a gdp policy into run directory `out`.

    See the module docstring.

    Args:
      init: parameters to start from instead of a fresh initialisation (fine-tuning a family policy).
      log: optional callable(str) for one progress line per checkpoint.
      workers: a placeto.rollouts.distributed.WorkerSpec: sample and simulate on Ray (see the module docstring).
      progress: a tqdm bar on stderr in placements sampled (config.updates * samples_per_update in all), with
        their rate, the ETA, the update's task and the best placement's objective so far.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        return _train_locked(config, make_tasks(graphs, clusters, config), out, resume, init, log, workers,
                             progress)


def _draw_on(pool, task: int, config: GdpConfig, params, key: jax.Array) -> Drawn:
    """An update's samples, drawn across the pool's workers.

    By ppo.draw_range; counted by this process's meter.
    """
    drawn = concat_drawn(pool.run(params, (task, key_data(key)), config.samples_per_update))
    record(drawn.objective)
    return drawn


def progress_bar(config: GdpConfig, samples: int, enabled: bool):
    """A tqdm bar of placements sampled.

    Of config.updates * samples_per_update; `samples` are done already (a resumed run starts there); it says it is
    compiling until the first update ends.
    """
    from tqdm import tqdm

    bar = tqdm(total=config.updates * config.samples_per_update, initial=samples, unit="placement",
               disable=not enabled, dynamic_ncols=True)
    bar.set_postfix_str("compiling the first update", refresh=True)
    return bar


def _train_locked(config: GdpConfig, tasks: list[Task], out: Path, resume: bool, init: Any, log,
                  workers: WorkerSpec | None = None, progress: bool = False) -> TrainSummary:
    t0 = time.perf_counter()
    read = None
    if resume:
        _check_config(out, config)
        if (out / CHECKPOINT).exists():
            check_resume_devices(out, {t.cluster.n_devices for t in tasks})
        read = _read(out)
    net, optimizer = make_net(config), make_optimizer(config)
    params = init if init is not None else init_params(config, tasks[0])
    st = RunState(params, optimizer.init(params), 0, 0, {})
    st = _load(out, st, read) if read is not None else st
    atomic_write_bytes(out / CONFIG, config.to_json().encode())
    (out / "best").mkdir(exist_ok=True)
    start_update, saved, last_save = st.update, None, -math.inf
    f, writer = _metrics_writer(out, st.update)
    root = jax.random.key(config.seed)
    try:
        with f, metered() as m, open_pool(workers, WORKER, config, [(t.graph, t.cluster) for t in tasks]) as pool, \
                progress_bar(config, st.samples, progress) as bar:
            while st.update < config.updates and time.perf_counter() - t0 < 60 * config.time_limit_minutes:
                task, key = tasks[st.update % len(tasks)], jax.random.fold_in(root, st.update)
                drawn = None if pool is None else _draw_on(pool, st.update % len(tasks), config, st.params, key)
                r = ppo_step(net, config, optimizer, st.params, st.opt_state, task, key, drawn)
                check_finite(r.params, r.loss, out, st.update, saved)
                best = dict(st.best)
                if r.best_objective < best.get(task.key, math.inf):
                    best[task.key] = r.best_objective
                    save_placement(out / "best" / f"{_safe(task.key)}.json", r.best_placement,
                                   task.cluster.device_names, graph=task.graph, cluster=task.cluster)
                st = RunState(r.params, r.opt_state, st.update + 1, st.samples + config.samples_per_update, best)
                writer.writerow(_metrics_row(st, task.key, r, time.perf_counter() - t0, m.calls / m.elapsed()))
                advance(bar, config.samples_per_update, first=st.update == start_update + 1)  # the 1st compiles
                bar.set_postfix(task=task.key[:16], best=ms(best[task.key]), batch=ms(r.mean_objective),
                                refresh=False)
                if saved is None or time.perf_counter() - last_save >= config.checkpoint_seconds:
                    f.flush()
                    _save(out, st)
                    saved, last_save = st.update, time.perf_counter()
                    if log:
                        log(f"update {st.update}/{config.updates} {task.key}: best {best[task.key] / 1e3:.3f} ms")
            if saved != st.update:
                f.flush()
                _save(out, st)
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM (simulator.interrupts): st is the last complete update's state
        raise stopped(e, lambda: _save(out, st), st.samples, config.updates * config.samples_per_update, "placements",
                      out / CHECKPOINT) from None
    wall = time.perf_counter() - t0
    return TrainSummary(st.update, st.samples, start_update, m.calls, wall, m.calls / max(wall, 1e-9), dict(st.best))


def _metrics_row(st: RunState, key: str, r: Any, seconds: float, calls_per_s: float) -> dict[str, Any]:
    """metrics.csv's row of the update just done.

    `st` after the update, `r` its ppo.StepResult.
    """
    return {"update": st.update - 1, "samples": st.samples, "seconds": f"{seconds:.2f}", "task": key,
            "loss": f"{r.loss:.6g}", "entropy": f"{r.entropy:.4f}", "mean_objective_us": f"{r.mean_objective:.3f}",
            "batch_best_us": f"{r.best_objective:.3f}", "best_us": f"{st.best[key]:.3f}",
            "sim_calls_per_s": f"{calls_per_s:.1f}"}


def _safe(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", key)
