"""REINFORCE for the Placeto policy: rollouts, gradients, checkpoints, logs.

One update = B episodes sampled in parallel on one graph (graphs taken in turn), then one Adam step:

    collect_rollout     B episodes; per step one jitted policy call for all B, then B simulator calls (host);
                        records placements, schedules, nodes and actions
    advantages          return-to-go minus the baseline: the mean return-to-go at that step over the recent
                        episodes of the same graph (a window of `baseline_window`, the current batch included)
    policy_gradient     re-evaluates the recorded states in fixed-size chunks (one jitted function per padding
                        bucket), optionally on a random subset of steps, and sums the gradients
                        (placeto.methods.placeto.gradient, with the baseline and the schedules)
    apply               clip, Adam with an exponentially decaying learning rate (one compiled update for all
                        runs)

A run directory holds config.json, checkpoint.msgpack, metrics.csv, tb/ (TensorBoard), best/<graph>.json
(best placement seen per training graph) and, with `snapshot_seconds`, snapshots/<update>.msgpack (the
parameters every so often, to choose a checkpoint from afterwards). Rerunning `train` on the same directory
resumes. While a `train` runs, it holds the directory's .lock (placeto.checkpoint_io.RunLock); a checkpoint is
written after the first update, every `checkpoint_seconds`, and at the end; a non-finite loss or parameter
stops the run, keeping the last checkpoint.

With `workers` (placeto.rollouts.distributed.WorkerSpec) the rollouts run in Ray actors, episode by episode
(placeto.methods.placeto.episodes): equal seeds give equal checkpoints for every number of workers, but not the
checkpoint of a run without workers, whose batches are sampled from one key (as the shipped policies were).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import math
import re
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import serialization
from tqdm import tqdm

from placeto.methods.placeto import env as E
from placeto.checkpoint_io import (CHECKPOINT, MAX_COUNTER, RunLock, check_devices, check_finite,
                                   check_resume_devices, check_same_model, counter, objectives, read_blob, restore,
                                   stopped)
from placeto.methods.placeto.config import PlacetoConfig
from placeto.rollouts.distributed import WorkerSpec, open_pool
from placeto.methods.placeto.episodes import concat_rollouts
from placeto.methods.placeto.rollout_workers import WORKER
from placeto.features import GraphArrays
from placeto.methods.placeto.gradient import (Baseline, baseline_update, choose_steps, clipped_adam, entropy_coef,
                                              learning_rate, make_grad_fn, make_optimizer, policy_gradient,
                                              returns_to_go, steps_of)
from placeto.methods.placeto.rollout import Rollout, collect_rollout
from placeto.methods.placeto.policy import Policy, make_policy
from placeto.methods.placeto.teacher import TIE, best_moves
from placeto.metrics_log import naming, resumed_rows
from placeto.tensorboard_log import ScalarWriter
from placeto.objective import meter
from placeto.progress import advance, ms
from placeto.rollouts.workers import key_data
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import atomic_write_bytes, check_output_path, write_json
from simulator.model.placement_file import save_placement

class TrainSummary(NamedTuple):
    """What a `train` call did.

    Runtimes are objectives (placeto.objective), microseconds.
    """

    episodes: int  # episode counter at the end (includes episodes of resumed-from runs)
    updates: int
    start_episode: int  # episode counter when this call started (0 unless resumed)
    sim_calls: int  # simulator calls of this call
    wall_seconds: float  # of this call
    episodes_per_second: float
    sim_calls_per_second: float
    best_runtime: dict[str, float]  # graph key -> best runtime seen
    best_placement_files: dict[str, str]  # graph key -> placement file


# ---- checkpoints -------------------------------------------------------------------------------------------
@dataclasses.dataclass
class TrainState:
    """Everything a resumed run needs (mutable: the training loop owns it)."""

    params: Any
    opt_state: Any
    baselines: dict[str, Baseline]
    key: jax.Array
    episode: int = 0
    update: int = 0
    sim_calls: int = 0  # over all calls
    best_runtime: dict[str, float] = dataclasses.field(default_factory=dict)


SNAPSHOTS = "snapshots"  # in a run directory: params-only blobs, <update>.msgpack (PlacetoConfig.snapshot_seconds)


def save_snapshot(out_dir: Path, st: TrainState) -> Path:
    """Write the parameters alone to snapshots/<update>.msgpack, atomically.

    As a checkpoint file's "params" (placement reads nothing else).
    """
    path = out_dir / SNAPSHOTS / f"{st.update:08d}.msgpack"
    path.parent.mkdir(exist_ok=True)
    atomic_write_bytes(path, serialization.msgpack_serialize({"params": serialization.to_state_dict(st.params),
                                                              "update": st.update, "episode": st.episode}))
    return path


def save_checkpoint(out_dir: Path, st: TrainState) -> None:
    """Write the whole state (flax.serialization bytes) atomically."""
    blob = {"params": serialization.to_state_dict(st.params), "opt_state": serialization.to_state_dict(st.opt_state),
            "baselines": {k: {"returns": b.returns, "count": b.count} for k, b in st.baselines.items()},
            "key": np.asarray(jax.random.key_data(st.key)), "episode": st.episode, "update": st.update,
            "sim_calls": st.sim_calls, "best_runtime": dict(st.best_runtime)}
    atomic_write_bytes(out_dir / CHECKPOINT, serialization.msgpack_serialize(blob))


def _copy(st: TrainState) -> TrainState:
    """A copy of `st` that `_update` does not change (its arrays are replaced there, never written into)."""
    return dataclasses.replace(st, baselines=dict(st.baselines), best_runtime=dict(st.best_runtime))


CHECKPOINT_FIELDS = ("params", "opt_state", "baselines", "key", "episode", "update", "sim_calls", "best_runtime")


def load_checkpoint(out_dir: Path, template: TrainState) -> TrainState | None:
    """The checkpoint in out_dir restored into `template`'s structures (None: none).

    Raises:
      InputError: naming the file and the field, for a truncated or corrupt checkpoint, or one whose shapes are not
        those of `template` (a checkpoint of another model config): see placeto.checkpoint_io.
    """
    path = Path(out_dir) / CHECKPOINT
    if not path.exists():
        return None
    blob = read_blob(path, CHECKPOINT_FIELDS)
    key_data = np.asarray(jax.random.key_data(template.key))
    counters = {k: counter(blob, k, path) for k in ("episode", "update", "sim_calls")}
    best = objectives(blob["best_runtime"], "field 'best_runtime'", path)
    try:
        baselines = {}
        for k, v in blob["baselines"].items():
            returns = np.asarray(v["returns"], np.float32)
            count = np.asarray(v["count"])
            if (returns.ndim != 2 or count.shape != () or count.dtype.kind not in "iu"
                    or not 0 <= count <= MAX_COUNTER or not np.all(np.isfinite(returns))):
                raise ValueError(f"baseline {str(k)[:40]!r}: returns must be a finite [window, steps] array, "
                                 f"count a counter")
            baselines[str(k)] = Baseline(returns, count.astype(np.int64))
        key = np.asarray(blob["key"], key_data.dtype)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        raise InputError(f"malformed training state ({type(e).__name__}: {str(e)[:120]})", str(path)) from None
    if key.shape != key_data.shape:
        raise InputError("malformed training state (random key)", str(path))
    return TrainState(params=restore(template.params, blob["params"], "params", path),
                      opt_state=restore(template.opt_state, blob["opt_state"], "opt_state", path),
                      baselines=baselines, key=jax.random.wrap_key_data(jnp.asarray(key)), best_runtime=best,
                      **counters)


def graph_keys(graphs: Sequence[Graph]) -> list[str]:
    """A file-safe unique key per graph: its name (indexed if names repeat)."""
    safe = [re.sub(r"[^A-Za-z0-9_.-]+", "_", g.name) or "graph" for g in graphs]
    if len(set(safe)) == len(safe):
        return safe
    return [f"{i:03d}_{s}" for i, s in enumerate(safe)]


# ---- the loop -------------------------------------------------------------------------------------------
class _Logger:
    """metrics.csv (appended across resumes), TensorBoard scalars and a tqdm bar."""

    def __init__(self, out_dir: Path, config: PlacetoConfig, start_episode: int, start_update: int):
        self.path = out_dir / "metrics.csv"
        # rows logged after the checkpoint we resume from are redone: dropped (a damaged log: set aside, warned)
        table = resumed_rows(out_dir, lambda update: update <= start_update)
        self.fields: list[str] | None = table.header if table else None
        self.tb = ScalarWriter(out_dir / "tb")
        self.bar = tqdm(total=config.episodes, initial=start_episode, unit="ep", disable=not config.progress,
                        dynamic_ncols=True)

    def row(self, metrics: dict[str, Any], step: int) -> None:
        new = self.fields is None
        if new:
            self.fields = list(metrics)
        with naming(self.path), self.path.open("a", newline="") as f:  # a full disk: named
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(metrics)
        self.tb.add({k: v for k, v in metrics.items() if k != "episode"}, step)

    def close(self) -> None:
        self.bar.close()
        self.tb.close()


def bar_postfix(key: str, metrics: dict[str, Any], best_us: float) -> dict[str, str]:
    """The progress bar's postfix after an update: graph, its last and best step time in ms, episodes a second."""
    return {"graph": key[:16], "rt": ms(metrics["final_runtime"]), "best": ms(best_us),
            "eps": f"{metrics['eps_per_s']:.2f}/s"}


def init_state(config: PlacetoConfig, policy: Policy, optimizer, arrays: GraphArrays) -> TrainState:
    key = jax.random.key(config.seed)
    key, k_init = jax.random.split(key)
    params = policy.init(k_init, arrays)
    return TrainState(params, optimizer.init(params), {}, key)


class Task(NamedTuple):
    """One (graph, cluster) pair the policy trains on.

    `key` names it in metrics and best/.
    """

    graph: Graph
    cluster: Cluster
    key: str


def make_tasks(graphs: Sequence[Graph], clusters: Cluster | Sequence[Cluster] | None, seed: int) -> list[Task]:
    """Every graph on every cluster, as Tasks in training order.

    clusters None: `graphs` are (graph, cluster) pairs, keyed `<graph>@<D>d`. One cluster: the graphs in turn,
    keyed by graph name. Several (mixed device counts): keys `<graph>@<D>d`, in a seeded permutation so that
    consecutive updates mix graphs and device counts (the order is a function of the seed: a resumed run continues
    the same sequence).
    """
    if clusters is None:  # (graph, cluster) pairs: each graph on its own cluster
        pairs = list(graphs)
        tasks = [Task(g, c, f"{k}@{c.n_devices}d") for (g, c), k in zip(pairs, graph_keys([g for g, _ in pairs]))]
    else:
        clusters = [clusters] if isinstance(clusters, Cluster) else list(clusters)
        keys = graph_keys(graphs)
        if len(clusters) == 1:
            return [Task(g, clusters[0], k) for g, k in zip(graphs, keys)]
        tasks = [Task(g, c, f"{k}@{c.n_devices}d") for g, k in zip(graphs, keys) for c in clusters]
    order = np.random.default_rng([seed, len(tasks)]).permutation(len(tasks))
    return [tasks[i] for i in order]


def train(config: PlacetoConfig, graphs: Sequence[Graph], cluster: Cluster | Sequence[Cluster] | None,
          out_dir: str | Path, resume: bool = True, init_params: Any = None,
          workers: WorkerSpec | None = None) -> TrainSummary:
    """Train one policy on `graphs` x `cluster` into out_dir.

    One (graph, cluster) task per update, in turn; `cluster` may also be a list (every cluster of it: mixed device
    counts) or None (`graphs` are then (graph, cluster) pairs). With resume and a checkpoint in out_dir, continues
    from it (same model config expected) up to config.episodes; stops early (with a checkpoint) after
    config.time_limit_minutes. A fresh run starts from `init_params` when given (fine-tuning a trained policy: same
    model config; a new optimizer). With `workers` (a placeto.rollouts.distributed.WorkerSpec), rollouts run on Ray.
    See the module docstring for that and for what out_dir holds.
    """
    if not graphs:
        raise ValueError("train: no graphs")
    out = Path(out_dir)
    check_output_path(out, directory=True)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):  # one writer per run directory: a second `train` on it is an InputError naming our pid
        return _train_locked(config, graphs, cluster, out, resume, init_params, workers)


def _train_locked(config: PlacetoConfig, graphs: Sequence[Graph], cluster: Cluster | Sequence[Cluster],
                  out: Path, resume: bool, init_params: Any, workers: WorkerSpec | None = None) -> TrainSummary:
    """`train` once it holds the run directory's lock.

    Nothing is written before the configuration is known to fit the checkpoint it resumes from.
    """
    tasks = make_tasks(graphs, cluster, config.seed)
    for t in tasks:
        check_devices(config, t.cluster.n_devices, out)
    if resume and (out / CHECKPOINT).exists():  # fail fast: before any model is built or any file written
        check_same_model(out, config)
        check_resume_devices(out, {t.cluster.n_devices for t in tasks})
        read_blob(out / CHECKPOINT, CHECKPOINT_FIELDS)
    policy, optimizer = make_policy(config), make_optimizer(config)
    contexts = [E.make_context(t.graph, t.cluster, config) for t in tasks]
    arrays = [jax.device_put(c.arrays) for c in contexts]
    keys = [t.key for t in tasks]
    st = init_state(config, policy, optimizer, arrays[0])
    if init_params is not None:
        st = TrainState(init_params, optimizer.init(init_params), {}, st.key)
    restored = load_checkpoint(out, st) if resume else None  # InputError (nothing written) if it does not fit
    atomic_write_bytes(out / "config.json", config.to_json().encode())
    if restored is None:  # a fresh run: drop rows a killed or replaced earlier run left behind
        (out / "metrics.csv").unlink(missing_ok=True)
    st = restored or st
    start_episode, start_calls, t0 = st.episode, st.sim_calls, time.time()
    grad_fn = make_grad_fn(policy, config.counterfactual_loss)
    apply = _make_apply(float(config.grad_clip))
    log = _Logger(out, config, start_episode, st.update)
    last_ckpt, start_update, saved_update = time.time(), st.update, (st.update if restored else None)
    last_snap = time.time()
    if config.snapshot_seconds > 0:
        save_snapshot(out, st)  # where this call starts from: a candidate too
    stack = contextlib.ExitStack()  # the Ray pool, if any
    committed = _copy(st)  # the state after the last complete update: what an interrupt keeps
    try:
        pool = stack.enter_context(open_pool(workers, WORKER, config, [(t.graph, t.cluster) for t in tasks]))
        deadline = t0 + 60 * config.time_limit_minutes if config.time_limit_minutes > 0 else math.inf
        while st.episode < config.episodes and time.time() < deadline:
            i = st.update % len(tasks)
            collect = None if pool is None else _pool_collect(pool, i, config.episodes_per_update)
            metrics = _update(config, policy, grad_fn, apply, st, contexts[i], arrays[i], keys[i], collect)
            check_finite(st.params, metrics["loss"], out, st.update, saved_update)
            _save_best(out, keys[i], st, metrics.pop("_best"), tasks[i].graph, tasks[i].cluster)
            elapsed = time.time() - t0
            metrics.update(wall_s=round(elapsed, 3), eps_per_s=(st.episode - start_episode) / max(elapsed, 1e-9),
                           sims_per_s=(st.sim_calls - start_calls) / max(elapsed, 1e-9))
            if st.update % config.log_every == 0 or st.episode >= config.episodes:
                log.row(metrics, st.episode)
            advance(log.bar, config.episodes_per_update, first=st.update == start_update + 1)  # 1st compiles
            log.bar.set_postfix(bar_postfix(keys[i], metrics, st.best_runtime[keys[i]]))
            if st.update == start_update + 1 or time.time() - last_ckpt >= config.checkpoint_seconds:
                save_checkpoint(out, st)  # also right after the first update: an early kill keeps the run
                last_ckpt, saved_update = time.time(), st.update
            if config.snapshot_seconds > 0 and time.time() - last_snap >= config.snapshot_seconds:
                save_snapshot(out, st)
                last_snap = time.time()
            committed = _copy(st)
        save_checkpoint(out, st)
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM (simulator.interrupts): keep every complete update
        raise stopped(e, lambda: save_checkpoint(out, committed), committed.episode, config.episodes, "episodes",
                      out / CHECKPOINT) from None
    finally:
        log.close()
        stack.close()
    elapsed = time.time() - t0
    files = {k: str(out / "best" / f"{k}.json") for k in keys if (out / "best" / f"{k}.json").exists()}
    return TrainSummary(st.episode, st.update, start_episode, st.sim_calls - start_calls, elapsed,
                        (st.episode - start_episode) / max(elapsed, 1e-9),
                        (st.sim_calls - start_calls) / max(elapsed, 1e-9), dict(st.best_runtime), files)


@functools.lru_cache(maxsize=None)
def _make_apply(grad_clip: float):
    """Jitted (grads, opt_state, params, lr) -> (params, opt_state, grad norm).

    Memoised per clip value.
    """
    optimizer = clipped_adam(grad_clip)

    @jax.jit
    def apply(grads, opt_state, params, lr):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
        return params, opt_state, optax.tree.norm(grads)

    return apply


def advantages(config: PlacetoConfig, ro: Rollout, st: TrainState, key_name: str,
               cf_steps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(advantages float64[T, B] of the actions, float64[T, B, Dm] of every device).

    REINFORCE: return-to-go minus the per-step baseline; the second array is zero. Counterfactual: the sampled
    action's advantage covers only the discounted future (return-to-go minus the step's own reward, minus its
    baseline), and every device gets its immediate reward minus the mean over devices. Both are divided by one
    common scale when normalize_advantages is set. With counterfactual_loss "best" or "improving" the second
    array is instead the target distribution of the cross-entropy (`best_device_targets`, `improving_targets`),
    not scaled. Updates
    st.baselines[key_name]. cf_steps: bool[T], the steps whose every device was simulated (None: all); the scale
    of the per-device advantages is taken over them.
    """
    returns = returns_to_go(ro.rewards, config.gamma)
    target = returns - ro.rewards if config.counterfactual else returns
    st.baselines[key_name], base = baseline_update(st.baselines.get(key_name), target, config.baseline_window)
    adv = target - base[:, None]
    t_len, b = adv.shape
    action_adv = np.zeros((t_len, b, config.max_devices))
    if config.counterfactual and config.counterfactual_loss in ("best", "improving"):
        targets = best_device_targets(ro, config.move_weight) if config.counterfactual_loss == "best" \
            else improving_targets(ro)
        action_adv[..., :ro.action_rewards.shape[-1]] = targets
        if config.normalize_advantages:  # the targets are a distribution: only the sampled advantages scale
            adv = adv / max(math.sqrt(float((adv ** 2).mean())), 1e-8) if np.any(adv) else adv
        return adv, action_adv
    if config.counterfactual:
        r = ro.action_rewards
        action_adv[..., :r.shape[-1]] = r - r.mean(-1, keepdims=True)
    if config.normalize_advantages:
        d = ro.action_rewards.shape[-1] if config.counterfactual else 1
        rows = action_adv if cf_steps is None else action_adv[cf_steps]
        scale = math.sqrt(float((adv ** 2).mean()) + float((rows ** 2).sum(-1).mean()) / d)
        adv, action_adv = adv / max(scale, 1e-8), action_adv / max(scale, 1e-8)
    return adv, action_adv


def best_device_targets(ro: Rollout, move_weight: float = 1.0) -> np.ndarray:
    """float64[T, B, D] the target distribution of counterfactual_loss "best".

    One-hot on the device of highest immediate reward (ro.action_rewards), the node's current device when it ties
    for best, else uniform over the tied devices (ties: within 1e-9 of the step's best, rewards being fractions of
    the single-device runtime); rows whose target is a move (not the current device) times `move_weight`
    (PlacetoConfig.move_weight).
    """
    r = ro.action_rewards  # [T, B, D]
    current = ro.placement[np.arange(r.shape[0]), :, ro.nodes].astype(np.int64)  # [T, B] the node's device before
    accepted = best_moves(r, current)  # the teacher's devices: the current one alone where it ties for best
    stays = np.take_along_axis(accepted, current[..., None], axis=-1)
    return accepted / accepted.sum(-1, keepdims=True) * np.where(stays, 1.0, move_weight)


def improving_targets(ro: Rollout) -> np.ndarray:
    """float64[T, B, D] the target distribution of counterfactual_loss "improving".

    The best move at each state where some move lowers the objective (one-hot on the device of highest immediate
    reward, uniform over ties within 1e-9), zero where none does: with PlacetoConfig.undo_worse a move that does
    not help is undone, so at such a state every choice leads to the same placement and nothing is to be learned.
    """
    r = ro.action_rewards  # [T, B, D]
    improving = r > TIE
    tied = improving & (r >= r.max(-1, keepdims=True) - TIE)
    return tied / np.maximum(tied.sum(-1, keepdims=True), 1)


def _pool_collect(pool, task: int, batch: int):
    """collect(params, key, seed) -> Rollout, split across the pool.

    `batch` episodes of task index `task`.
    """
    return lambda params, key, seed: concat_rollouts(pool.run(params, (task, key_data(key), seed), batch))


def _update(config: PlacetoConfig, policy: Policy, grad_fn, apply, st: TrainState, ctx: E.EnvContext,
            arrays: GraphArrays, key_name: str, collect=None) -> dict[str, Any]:
    """One REINFORCE update on one graph; mutates st and returns the metrics row.

    collect(params, key, seed) -> Rollout replaces `collect_rollout` (the episodes split across workers:
    `_pool_collect`).
    """
    st.key, k_roll, k_seed = jax.random.split(st.key, 3)
    seed = int(jax.random.randint(k_seed, (), 0, 2**31 - 1))
    t_roll = time.time()
    rng, selection, cf_steps = np.random.default_rng(seed), None, None
    if collect is None:
        if config.counterfactual:  # every device simulated only where the gradient will look
            selection = choose_steps(config, ctx.n_steps, rng)
            cf_steps = np.zeros(ctx.n_steps, bool)
            cf_steps[steps_of(config, selection, ctx.n_steps)] = True
        ro = collect_rollout(policy, st.params, ctx, arrays, k_roll, config.episodes_per_update, seed,
                             counterfactual=False if cf_steps is None else cf_steps)
    else:
        ro = collect(st.params, k_roll, seed)
    t_grad = time.time()
    adv, action_adv = advantages(config, ro, st, key_name, cf_steps)
    ent = entropy_coef(config, st.episode)
    grads, (loss, pg, entropy) = policy_gradient(grad_fn, st.params, ctx, arrays, ro, adv, action_adv, config,
                                                 rng, ent, selection)
    lr = learning_rate(config, st.update)
    st.params, st.opt_state, gnorm = apply(grads, st.opt_state, st.params, np.float32(lr))
    st.episode += config.episodes_per_update
    st.update += 1
    st.sim_calls += ro.sim_calls
    b = int(np.argmin(ro.best_runtime))
    prev = st.best_runtime.get(key_name, math.inf)
    st.best_runtime[key_name] = min(prev, float(ro.best_runtime[b]))
    return {"update": st.update, "episode": st.episode, "graph": key_name, "sim_calls": st.sim_calls,
            "initial_runtime": float(ro.initial_runtime.mean()), "final_runtime": float(ro.final_runtime.mean()),
            "best_in_batch": float(ro.best_runtime[b]), "best_runtime": st.best_runtime[key_name],
            "lower_bound": ctx.lower_bound, "final_ratio": float(ro.final_runtime.mean()) / ctx.lower_bound,
            "loss": float(loss), "pg": float(pg), "entropy": float(entropy), "grad_norm": float(gnorm),
            "entropy_coef": ent, "lr": lr, "rollout_s": round(t_grad - t_roll, 3),
            "grad_s": round(time.time() - t_grad, 3),
            "_best": (float(ro.best_runtime[b]), ro.best_placement[b], prev)}


def _save_best(out: Path, key: str, st: TrainState, best, graph: Graph, cluster: Cluster) -> None:
    """Write best/<key>.json (placed `graph` on `cluster`) and best/runtimes.json if this update beat the best."""
    runtime, placement, prev = best
    if runtime < prev:
        save_placement(out / "best" / f"{key}.json", placement, cluster.device_names, graph=graph, cluster=cluster)
        write_json(out / "best" / "runtimes.json", {"runtime_us": st.best_runtime})


def finetune_params(config: PlacetoConfig, params: Any, graph: Graph, cluster: Cluster, episodes: int,
                    seed: int = 0, first_update_seconds: float = 0.0) -> tuple[Any, np.ndarray, float]:
    """Fine-tune a copy of `params` on one graph, in memory (no run directory).

    Placeto's and GDP's per-graph fine-tuning: `episodes` episodes. Schedules (learning rate, entropy) span the
    fine-tuning budget; stops early when the current meter (`placeto.objective`) is spent, and before an update
    that would end after the meter's deadline as far as the last update's wall seconds tell (the first update's:
    `first_update_seconds`).

    Returns (params, best placement int32[N] any episode visited, its objective in microseconds).
    """
    cfg = config.replace(episodes=episodes, seed=seed)
    policy, optimizer = make_policy(cfg), make_optimizer(cfg)
    ctx = E.make_context(graph, cluster, cfg)
    arrays = jax.device_put(ctx.arrays)
    st = TrainState(params, optimizer.init(params), {}, jax.random.key(seed))
    grad_fn, apply = make_grad_fn(policy, cfg.counterfactual_loss), _make_apply(float(cfg.grad_clip))
    best, best_score, m = np.zeros(graph.n_nodes, np.int32), math.inf, meter()
    last = first_update_seconds
    while st.episode < episodes and not m.exhausted() and m.seconds_left() > last:
        t0 = time.perf_counter()
        row = _update(cfg, policy, grad_fn, apply, st, ctx, arrays, graph.name)
        last = time.perf_counter() - t0
        runtime, placement, _ = row["_best"]
        if runtime < best_score:
            best, best_score = placement.astype(np.int32), runtime
    return st.params, best, best_score
