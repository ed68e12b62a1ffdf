"""The learned methods by name, loaded on demand.

Search, compare, the shipped policies and the CLI ask here, never a method module by name. Each entry names the
package whose `METHOD` (placeto.methods.base.Method) is loaded when first asked for; the strings below are real
imports (the import-cycle test, tests/test_import_cycles.py, counts them as such).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, NamedTuple

from placeto.methods.base import Method
from placeto.policies import CHECKPOINT, SHIPPED, git_commit, resolve_checkpoint
from simulator.model.errors import InputError
from simulator.model.io import PathLike, atomic_write_bytes, write_json
from simulator.model.limits import short_repr

PACKAGES = {
    "placeto": "placeto.methods.placeto",
    "gdp": "placeto.methods.gdp",
    "rnn": "placeto.methods.rnn",
    "hierarchical": "placeto.methods.hierarchical",
}
DEFAULT = "placeto"  # the method of a run directory whose config.json has no "method" field
# the compare rows of each method (its Method.variants; tested equal), known without importing the method
VARIANTS = {"placeto": ("placeto", "placeto-search"), "gdp": ("gdp", "gdp-search"), "rnn": ("rnn",),
            "hierarchical": ("hierarchical",)}


PER_GRAPH = ("rnn", "hierarchical")  # trained on the graph they place (their Method.per_graph; tested equal)


def names() -> tuple[str, ...]:
    return tuple(PACKAGES)


def get(name: str) -> Method:
    """The Method called `name`.

    Raises:
      InputError: naming the known methods, if `name` is none of them.
    """
    if name not in PACKAGES:
        raise InputError(f"unknown learned method {name!r} (known: {', '.join(PACKAGES)})")
    return importlib.import_module(PACKAGES[name]).METHOD


def of_variant(variant: str) -> Method:
    """The Method providing compare row `variant` ("gdp-search" -> gdp)."""
    for name, rows in VARIANTS.items():
        if variant in rows:
            return get(name)
    raise InputError(f"unknown learned method {variant!r} (known: {', '.join(all_variants())})")


def all_variants() -> tuple[str, ...]:
    return tuple(v for rows in VARIANTS.values() for v in rows)


def run_method(run_dir: PathLike | None) -> str | None:
    """The method a run directory's config.json names.

    Its "method" field, DEFAULT without one; None when `run_dir` is None or has no readable config.json.

    Raises:
      InputError: naming the file, when its "method" names no learned method (a number, a list, an unknown
        name): a run directory this project wrote always names its own.
    """
    if run_dir is None:
        return None
    path = Path(str(run_dir)) / "config.json"
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    method = d.get("method", DEFAULT)
    if not isinstance(method, str) or method not in PACKAGES:
        raise InputError(f"field 'method': {short_repr(method)} is not a learned method (known: "
                         f"{', '.join(PACKAGES)})", str(path))
    return method


def checkpoint_method(name_or_dir: PathLike | None) -> str | None:
    """The method of a shipped policy's name or a run directory.

    None for None or anything unresolvable; an InputError for a run directory whose config.json names no learned
    method (see run_method).
    """
    if name_or_dir is None:
        return None
    try:
        path = resolve_checkpoint(name_or_dir)
    except InputError:
        return None
    return run_method(path)


def policy_kind(method: str | None) -> str:
    """The family-trained method a checkpoint of `method` counts as.

    Itself, or DEFAULT for None (no or no readable checkpoint) and for a per-graph run (which no family-trained
    method can use).
    """
    return method if method in PACKAGES and VARIANTS[method] and method not in PER_GRAPH else DEFAULT


def load_run(run_dir: PathLike) -> tuple[Method, Any, Any]:
    """(method, config, params) of a run directory or shipped policy.

    Whichever method trained it.
    """
    path = resolve_checkpoint(run_dir)
    method = get(run_method(path) or DEFAULT)
    config, params = method.load(path)
    return method, config, params


def ship(run_dir: PathLike, name: str, provenance: dict[str, Any], root: PathLike | None = None) -> Path:
    """Ship a run: copy its config and parameters to `<root>/<name>/`.

    Not its optimizer state; provenance.json is written beside them. `root` defaults to the package's shipped
    policies (placeto.policies.SHIPPED). Any method's run: its config.json keeps its "method" field.
    """
    from flax import serialization  # here: importing the registry imports no jax or flax (the CLI's start-up)

    _, config, params = load_run(run_dir)
    dest = Path(root if root is not None else SHIPPED) / name
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dest / "config.json", config.to_json().encode())
    blob = {"params": serialization.to_state_dict(params)}
    atomic_write_bytes(dest / CHECKPOINT, serialization.msgpack_serialize(blob))
    write_json(dest / "provenance.json", {"name": name, "commit": git_commit(), "seed": config.seed,
                                          **provenance})
    return dest


class PlaceRequest(NamedTuple):
    """What `placeto place` runs: a compare row (variant) and its budget."""

    method: str  # the variant: "placeto", "placeto-search", "gdp", ...
    budget: float | None  # simulator calls (None: unlimited, a wall-clock budget only)
    budgeted: bool  # run inside a budget (`Method.run`, as compare does), else a plain `Method.place`


def resolve_place(method: str | None, checkpoint: PathLike | None, budget: int | None, seconds: float | None,
                  samples: int, finetune_episodes: int, graph: Any) -> PlaceRequest:
    """The variant and budget `place` runs with.

    Args:
      method: the variant asked for (None: the checkpoint's method, else "placeto", or "placeto-search" when a
        budget is given).
      checkpoint: a shipped policy's name or a run directory (None: each method's default).
      budget, seconds: the budget asked for (None: not given).
      samples, finetune_episodes: extra sampled placements and fine-tuning episodes asked for.
      graph: the graph to place (a greedy decode's cost in calls can depend on its size).

    Raises:
      InputError: the method and checkpoint do not go together, or a searching method has no budget.
    """
    owner = checkpoint_method(checkpoint)  # its config.json's "method" (None: no checkpoint)
    if method is None and owner not in (None, DEFAULT):
        method = owner  # a gdp / rnn / hierarchical run directory
    if method in PACKAGES and get(method).per_graph:
        if finetune_episodes:
            raise InputError(f"--finetune-episodes: {method} policies are per graph (train longer instead)")
        if checkpoint is not None and budget is None and seconds is None:
            budget = 2 + samples  # the run's best placement, the greedy decode and the samples
    greedy_calls = of_variant(method).greedy_calls if method in all_variants() else None
    if greedy_calls is not None and budget is None and seconds is None:
        # greedy (and the single device, where the policy keeps it) + samples (+ fine-tuning)
        budget = greedy_calls(checkpoint, graph) + samples + finetune_episodes
    if checkpoint is not None and method in all_variants():
        wanted = of_variant(method)
        if not wanted.per_graph and policy_kind(owner) != wanted.name:
            kind = "a gdp" if wanted.name == "gdp" else "a Placeto"
            raise InputError(f"--method {method} needs {kind} policy; {checkpoint} is not one")
    budgeted = seconds is not None or budget is not None or finetune_episodes > 0
    method = method or ("placeto-search" if seconds is not None or budget is not None else "placeto")
    if method != "placeto" and not budgeted:
        raise InputError(f"--method {method} searches: give --seconds S or --budget N")
    if budgeted or method != "placeto":
        return PlaceRequest(method, budget if budget is not None else (None if seconds is not None else 10**9), True)
    return PlaceRequest(method, budget, False)
