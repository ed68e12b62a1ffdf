"""Validated run directory reads: each problem one InputError.

A run directory (of `placeto train`, or a shipped policy) holds config.json and checkpoint.msgpack. It is data
like a graph file: it may be truncated by a kill, edited by hand, or written by a run with another model config.
Whoever reads one goes through here:

    read_config(run_dir, cls)               config.json -> the method's config `cls` (types and ranges checked)
    read_blob(run_dir / CHECKPOINT, keys)   msgpack -> dict holding `keys`
    restore(template, state, where, src)    a state dict into `template`'s pytree: same keys, shapes, dtype
                                            kinds, finite floats; else an InputError naming the leaf
    param_template(init)                    the template for restore: init's pytree, traced, never run
    check_devices(config, n, src)           a policy of config.max_devices can place on n devices
    check_resume_devices(run_dir, counts)   a resumed run is asked for the device counts it trained with
    counter(blob, key, src), objective(...) a checkpoint's counters and best objectives, typed and in range
    with RunLock(run_dir): ...              one writer per run directory (a second gets an InputError)
    save_table_run / load_table_run         a run directory that also keeps its optimizer state, step and a
                                            table of float rows (the imitation experiments; resumable)
"""

from __future__ import annotations

import fcntl
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from simulator.interrupts import Interrupted, as_interrupted, deferred
from simulator.model.errors import InputError
from simulator.model.io import PathLike, atomic_write_bytes, read_json
from simulator.model.limits import short_repr

CONFIG = "config.json"
CHECKPOINT = "checkpoint.msgpack"
MAX_COUNTER = 2**53  # updates, samples, episodes, simulator calls: exact in a float64, beyond any run


def read_config(run_dir: PathLike, cls: type) -> Any:
    """The config of class `cls` stored in `run_dir`/config.json.

    Args:
      cls: a method's frozen config dataclass with `from_dict`.

    Raises:
      InputError: naming the file and the field, if the file holds no valid `cls`.
    """
    path = Path(run_dir) / CONFIG
    d = read_json(path)
    if not isinstance(d, dict):
        raise InputError(f"expected a JSON object of {cls.__name__} fields", str(path))
    for key, value in d.items():  # before any float() of it: an OverflowError, not a message
        if type(value) is int and abs(value) > 2**63:
            raise InputError(f"field {short_repr(key)}: {short_repr(value)} is out of range", str(path))
    try:
        return cls.from_dict(d)
    except (TypeError, ValueError, OverflowError) as e:
        raise InputError(str(e).removeprefix(f"{cls.__name__}: "), str(path)) from None


def read_blob(path: PathLike, keys: Iterable[str] = ("params",)) -> dict[str, Any]:
    """The msgpack dictionary at `path`, which must hold `keys`.

    Raises:
      InputError: if the file is missing, truncated or corrupt, or lacks a key.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", str(path)) from None
    if not data:
        raise InputError("empty checkpoint (was the run killed while it was written?)", str(path))
    try:
        blob = serialization.msgpack_restore(data)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as e:
        raise InputError(f"not a readable checkpoint (truncated or corrupt: {e})", str(path)) from None
    if not isinstance(blob, dict):
        raise InputError("not a checkpoint: expected a msgpack map", str(path))
    missing = [k for k in keys if k not in blob]
    if missing:
        raise InputError(f"checkpoint has no {', '.join(repr(k) for k in missing)}", str(path))
    return blob


def counter(blob: Mapping[str, Any], key: str, source: PathLike) -> int:
    """`blob[key]`, a training counter: an integer in [0, MAX_COUNTER].

    Not a bool, nor a float or string that int() would take.

    Raises:
      InputError: naming `source` and the field.
    """
    value = blob.get(key)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or \
            not 0 <= int(value) <= MAX_COUNTER:
        raise InputError(f"field {key!r}: {short_repr(value)} is not a counter (an integer in [0, 2^53])",
                         str(source))
    return int(value)


def objective(value: Any, where: str, source: PathLike) -> float:
    """A checkpoint's best objective: microseconds >= 0 (or inf).

    inf before the first update.

    Raises:
      InputError: naming `source` and `where`.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not (isinstance(value, (float, np.floating)) or abs(value) < 2**1023) or not float(value) >= 0:
        raise InputError(f"{where}: {short_repr(value)} is not an objective (microseconds >= 0)", str(source))
    return float(value)


def objectives(value: Any, where: str, source: PathLike) -> dict[str, float]:
    """A checkpoint's {task key: best objective} map, checked."""
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a map of task -> best objective, got {type(value).__name__}",
                         str(source))
    return {str(k): objective(v, f"{where}[{short_repr(k)}]", source) for k, v in value.items()}


def restore(template: Any, state: Any, where: str, source: PathLike) -> Any:
    """Restore flax state dict `state` into `template`'s pytree, checked.

    `state` was read from `source`.

    flax's from_state_dict checks neither keys nor shapes, so a checkpoint of a wider model would load and fail
    later, deep in a jitted function; this checks both first.

    Raises:
      InputError: naming `where` and the leaf path, unless the keys match and every leaf has the template's shape
        and dtype kind (float / int / bool), with finite floats.
    """
    expected = serialization.to_state_dict(template)
    _check_tree(expected, state, where, str(source))
    return serialization.from_state_dict(template, state)


def param_template(init: Callable[[], Any]) -> Any:
    """`restore`'s template: `init()`'s pytree, zero-filled.

    `init` is a flax init; the leaves have its shapes and dtypes, and restore keeps the structure and replaces every
    leaf. Traced once (jax.eval_shape), never run: running a flax init compiles each initializer and layer op apart,
    seconds of a placement command's start-up for values that restore throws away.
    """
    return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(init))


def _check_tree(expected: Any, got: Any, where: str, source: str) -> None:
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            raise InputError(f"{where}: expected a map, got {type(got).__name__}", source)
        if set(expected) != set(got):
            extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
            raise InputError(f"{where}: keys differ from this model's (missing {missing[:3]}, unexpected "
                             f"{extra[:3]}): a checkpoint of another model config?", source)
        for k in expected:
            _check_tree(expected[k], got[k], f"{where}/{k}", source)
        return
    if expected is None:
        return
    e, g = np.asarray(expected), got
    if not isinstance(g, (np.ndarray, np.generic, int, float, bool)):
        raise InputError(f"{where}: expected an array, got {type(g).__name__}", source)
    g = np.asarray(g)
    if e.shape != g.shape:
        raise InputError(f"{where}: shape {g.shape} but this model config has {e.shape} (a checkpoint of another "
                         f"model config?)", source)
    if _kind(e.dtype) != _kind(g.dtype):
        raise InputError(f"{where}: dtype {g.dtype}, expected {e.dtype}", source)
    if g.dtype.kind == "f" and not np.all(np.isfinite(g)):
        raise InputError(f"{where}: holds NaN or infinite values", source)


def _kind(dtype: np.dtype) -> str:
    return {"f": "float", "c": "complex", "b": "bool", "i": "int", "u": "int", "V": "key"}.get(dtype.kind, "other")


def check_devices(config: Any, n_devices: int, source: PathLike) -> None:
    """InputError unless `config`'s policy can place on `n_devices`."""
    if n_devices > config.max_devices:
        raise InputError(f"the policy places on at most {config.max_devices} devices (max_devices), not "
                         f"{n_devices}", str(source))


# ---- training-time checks -----------------------------------------------------------------------------------------
def check_same_model(out: Path, config: Any) -> None:
    """InputError unless the run's model fields are `config`'s.

    A run without config.json passes.

    Resuming with another model would mix the parameters of two networks.
    """
    if not (out / "config.json").exists():
        return
    old = read_config(out, type(config))
    if old.model_fields() != config.model_fields():
        raise InputError(f"the checkpoint was trained with model fields (hidden, rounds, max_devices, group_agg, "
                         f"device_onehot, schedule_features) = {old.model_fields()}, not {config.model_fields()}: resume with the "
                         f"same model config, or pass --fresh", str(out / "config.json"))


def trained_devices(out: Path) -> set[int]:
    """The device counts the run in `out` trained on, from best/.

    The `@<D>d` of a task key (mixed device counts, gdp), else the length of the placement file's device list.
    Unreadable files are skipped: this is evidence, not validation (empty: nothing recorded yet).
    """
    counts = set()
    for path in sorted((out / "best").glob("*.json")):
        match = re.search(r"@(\d+)d\.json$", path.name)
        if match:
            counts.add(int(match.group(1)))
            continue
        try:
            devices = read_json(path).get("devices") if path.name != "runtimes.json" else None
        except (InputError, AttributeError):
            continue
        if isinstance(devices, list) and devices:
            counts.add(len(devices))
    return counts


def check_resume_devices(out: Path, asked: Iterable[int]) -> None:
    """InputError unless `asked` has every device count `out` trained on.

    `asked`: the clusters of the `train` that resumes it. Resuming a 4-device run with --devices 8 would silently
    train another task.
    """
    trained, asked = trained_devices(out), set(asked)
    if trained - asked:
        want = ",".join(map(str, sorted(trained)))
        raise InputError(f"the run was trained with {want} devices, not {','.join(map(str, sorted(asked)))}: "
                         f"resume with --devices {want}, or pass --fresh or another --out", str(out))


def check_finite(params: Any, loss: float, out: Path, update: int, saved_update: int | None) -> None:
    """InputError (training stops) on a non-finite loss or parameter.

    The last good checkpoint, of update `saved_update`, is left as it is.
    """
    if math.isfinite(loss) and bool(_all_finite(params)):
        return
    kept = f"kept the checkpoint of update {saved_update}" if saved_update is not None else "no checkpoint saved"
    raise InputError(f"training diverged at update {update} (loss {loss:g}, non-finite parameters?): stopped, "
                     f"{kept}; lower lr or grad_clip", str(out))


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


# ---- the run directory lock -------------------------------------------------------------------------------------
LOCK = ".lock"


class RunLock:
    """An exclusive lock held while one `train` writes a run directory.

    `run_dir/.lock` holds the holder's pid and is flock'ed by it: the kernel drops the flock when the holder
    dies, however it dies, so a lock file left by a dead pid is simply taken over. The file is emptied, not
    removed, on release (removing it would let two later runs lock two different files).
    """

    def __init__(self, run_dir: PathLike):
        self.path = Path(run_dir) / LOCK
        self.fd: int | None = None

    def __enter__(self) -> "RunLock":
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise InputError(f"cannot create the run lock: {e.strerror or e}", str(self.path)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise InputError(f"the run directory is in use by another `placeto train` (pid {holder}, lock "
                             f"{self.path}); wait for it or use another --out", str(self.path.parent)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def check_init_model(init_config: Any, config: Any, source: str) -> None:
    """InputError unless the `--init-from` policy has this run's model.

    `source` is the --init-from argument; any config with `model_fields()` (Placeto's or gdp's) will do.
    """
    if init_config.model_fields() != config.model_fields():
        raise InputError(f"--init-from {source}: its model config differs from this run's "
                         f"({init_config.model_fields()} vs {config.model_fields()})")


def save_table_run(out: PathLike, config: Any, params: Any, opt_state: Any, step: int, rows: list[tuple],
                   columns: tuple[str, ...]) -> None:
    """Write a resumable run directory that policies can load.

    `load_table_run` reads it back.

    config.json comes from config.to_json(); checkpoint.msgpack holds "params" (what policies load), the
    optimizer state, `step` and `rows` (tuples of numbers named `columns`). Each file is written atomically.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / CONFIG, config.to_json().encode())
    blob = {"params": serialization.to_state_dict(params), "opt_state": serialization.to_state_dict(opt_state),
            "step": step, "rows": {str(i): dict(zip(columns, map(float, r))) for i, r in enumerate(rows)}}
    atomic_write_bytes(out / CHECKPOINT, serialization.msgpack_serialize(blob))


def load_table_run(out: PathLike, params: Any, opt_state: Any, columns: tuple[str, ...]) -> tuple:
    """Read `save_table_run`'s directory back.

    Returns (params, opt_state, step, rows).

    Params and optimizer state are restored into the given templates; rows come back as tuples of floats in
    `columns` order.

    Raises:
      InputError: naming the file, if it is missing, malformed or of another model.
    """
    path = Path(out) / CHECKPOINT
    blob = read_blob(path, ("params", "opt_state", "step", "rows"))
    try:
        rows = [tuple(float(r[k]) for k in columns)
                for _, r in sorted(dict(blob["rows"]).items(), key=lambda kv: int(kv[0]))]
        step = int(blob["step"])
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise InputError(f"malformed step or rows ({e})", str(path)) from None
    return (restore(params, blob["params"], "params", path), restore(opt_state, blob["opt_state"], "opt_state", path),
            step, rows)


def stopped(e: KeyboardInterrupt, save: Callable[[], None], done: int, total: int, unit: str,
            path: Path) -> Interrupted:
    """A `train` loop stopped by a signal: the last complete update's checkpoint written, and the interrupt to raise.

    `save` writes it (signals held meanwhile: simulator.interrupts.deferred); `done` of `total` `unit`s (episodes,
    placements) are in it, and the same command resumes from there. The interrupt's one line says so.
    """
    with deferred():
        save()
    return as_interrupted(e).adding(f"train: checkpoint kept at {done} of {total} {unit} ({path}); the same "
                                    f"command resumes from {unit.rstrip('s')} {done}")
