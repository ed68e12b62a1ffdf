"""The learned methods by name, loaded on demand: search, compare, the shipped policies and the CLI ask here,
never a method module by name.

Each entry names the package whose `METHOD` (placeto.methods.base.Method) is loaded when first asked for; the
strings below are real imports (the import-cycle test, tests/test_import_cycles.py, counts them as such).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

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
    """The Method called `name`; InputError naming the known ones otherwise."""
    if name not in PACKAGES:
        raise InputError(f"unknown learned method {name!r} (known: {', '.join(PACKAGES)})")
    return importlib.import_module(PACKAGES[name]).METHOD


def of_variant(variant: str) -> Method:
    """The Method that provides compare row `variant` (e.g. "gdp-search" -> gdp)."""
    for name, rows in VARIANTS.items():
        if variant in rows:
            return get(name)
    raise InputError(f"unknown learned method {variant!r} (known: {', '.join(all_variants())})")


def all_variants() -> tuple[str, ...]:
    return tuple(v for rows in VARIANTS.values() for v in rows)


def run_method(run_dir: PathLike | None) -> str | None:
    """The method of a run directory (its config.json's "method", DEFAULT without one); None when `run_dir` is
    None or has no readable config.json. InputError naming the file when its "method" names no learned method
    (a number, a list, an unknown name): a run directory this project wrote always names its own."""
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
    """The method of a shipped policy name or run directory (None for None or anything unresolvable; InputError
    for a run directory whose config.json names no learned method, see run_method)."""
    if name_or_dir is None:
        return None
    try:
        path = resolve_checkpoint(name_or_dir)
    except InputError:
        return None
    return run_method(path)


def policy_kind(method: str | None) -> str:
    """The family-trained method whose policy a checkpoint of `method` counts as: itself, or DEFAULT for None
    (no or no readable checkpoint) and for a per-graph run (which no family-trained method can use)."""
    return method if method in PACKAGES and VARIANTS[method] and method not in PER_GRAPH else DEFAULT


def load_run(run_dir: PathLike) -> tuple[Method, Any, Any]:
    """(method, config, params) of a run directory or shipped policy, whichever method trained it."""
    path = resolve_checkpoint(run_dir)
    method = get(run_method(path) or DEFAULT)
    config, params = method.load(path)
    return method, config, params


def ship(run_dir: PathLike, name: str, provenance: dict[str, Any], root: PathLike | None = None) -> Path:
    """Copy a run's config and parameters (not its optimizer state) to `<root>/<name>/` with provenance.json,
    root defaulting to the package's shipped policies (placeto.policies.SHIPPED). Any method's run: its
    config.json keeps its "method" field."""
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
