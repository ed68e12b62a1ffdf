"""Shipped trained policies: a registry of small run directories inside the package, and checkpoint resolution.

A shipped policy is a folder `placeto/shipped/<name>/` with `config.json` (the PlacetoConfig or, for names
containing "gdp", the GdpConfig it was trained with), `checkpoint.msgpack` (the parameters only: no optimizer
state, a few hundred kB) and `provenance.json` (the command that reproduces it, seed, commit, training time and
zero-shot metrics). Wherever a checkpoint is asked for (`placeto place --checkpoint`, `compare --checkpoint`,
`train --init-from`) a shipped name or a run directory of `placeto train` is accepted; `placeto place` without
one uses `DEFAULT_POLICY`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from placeto.checkpoint_io import read_blob, read_config, restore
from placeto.methods.placeto.config import PlacetoConfig
from simulator.errors import InputError
from simulator.io import PathLike, atomic_write_bytes, write_json

SHIPPED = Path(__file__).resolve().parent / "shipped"
CHECKPOINT = "checkpoint.msgpack"  # in a run directory, beside config.json
DEFAULT_POLICY = "general"  # trained on all three families at 2, 4 and 8 devices
DEFAULT_GDP = "gdp-general"  # the gdp methods' default: gdp on all three families at 2, 4 and 8 devices


class ShippedPolicy(NamedTuple):
    name: str
    path: Path
    provenance: dict[str, Any]  # command, seed, commit, training minutes, metrics


def shipped_policies() -> list[ShippedPolicy]:
    """Every policy shipped in the package, by name."""
    out = []
    for d in sorted(SHIPPED.glob("*/")):
        if (d / "config.json").is_file() and (d / CHECKPOINT).is_file():
            prov_file = d / "provenance.json"
            prov = json.loads(prov_file.read_text()) if prov_file.is_file() else {}
            out.append(ShippedPolicy(d.name, d, prov))
    return out


def resolve_checkpoint(name_or_dir: PathLike | None) -> Path:
    """The run directory of a shipped policy name, of a run directory path, or (None) of the default policy."""
    if name_or_dir is None:
        name_or_dir = DEFAULT_POLICY
    text = str(name_or_dir)
    shipped = SHIPPED / text
    if "/" not in text and (shipped / CHECKPOINT).is_file():
        return shipped
    d = Path(text)
    for needed in ("config.json", CHECKPOINT):
        if not (d / needed).is_file():
            names = ", ".join(p.name for p in shipped_policies()) or "none"
            raise InputError(f"{text}: neither a shipped policy ({names}) nor a training run directory "
                             f"(no {needed})")
    return d


def load_config(checkpoint: PathLike | None) -> PlacetoConfig:
    """The PlacetoConfig of a shipped policy or run directory."""
    return read_config(resolve_checkpoint(checkpoint))  # validated: InputError naming config.json and the field


def load_policy_params(checkpoint: PathLike | None) -> tuple[PlacetoConfig, Any]:
    """(config, params) of a shipped policy or run directory, params restored into the network's structure."""
    from placeto.features import graph_arrays
    from placeto.methods.placeto.policy import make_policy
    from simulator.cluster import cluster_preset
    from simulator.generate import layered_dag

    config = load_config(checkpoint)
    # Parameter shapes do not depend on the graph: any small graph gives the template.
    probe = layered_dag(8, seed=0)
    cluster = cluster_preset("placeto-k80", min(2, config.max_devices))
    arrays = graph_arrays(probe, cluster, np.arange(probe.n_nodes, dtype=np.int32), config.max_devices)
    template = make_policy(config).init(jax.random.key(0), arrays)
    path = resolve_checkpoint(checkpoint) / CHECKPOINT
    return config, restore(template, read_blob(path)["params"], "params", path)  # shapes checked: InputError


def git_commit() -> str:
    """The repository's HEAD commit (or "unknown" outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def ship(run_dir: PathLike, name: str, provenance: dict[str, Any], root: PathLike = SHIPPED) -> Path:
    """Copy a run's config and parameters (not its optimizer state) to `<root>/<name>/` with provenance.json.
    Placeto and gdp runs alike (a gdp run's config.json says "method": "gdp" and stays so)."""
    from placeto.methods.gdp.place import is_gdp_run, load_run

    config, params = load_run(run_dir) if is_gdp_run(run_dir) else load_policy_params(run_dir)
    dest = Path(root) / name
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dest / "config.json", config.to_json().encode())
    blob = {"params": serialization.to_state_dict(params)}
    atomic_write_bytes(dest / CHECKPOINT, serialization.msgpack_serialize(blob))
    write_json(dest / "provenance.json", {"name": name, "commit": git_commit(), "seed": config.seed,
                                          **provenance})
    return dest
