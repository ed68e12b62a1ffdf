"""Shipped policies (run directories in the package); resolution.

A shipped policy is a folder `placeto/shipped/<name>/` with `config.json` (the PlacetoConfig or, for names
containing "gdp", the GdpConfig it was trained with), `checkpoint.msgpack` (the parameters only: no optimizer
state, a few hundred kB) and `provenance.json` (the command that reproduces it, seed, commit, training time and
zero-shot metrics). Wherever a checkpoint is asked for (`placeto place --checkpoint`, `compare --checkpoint`,
`train --init-from`) a shipped name or a run directory of `placeto train` is accepted; `placeto place` without
one uses `DEFAULT_POLICY`. Which method a checkpoint is of, loading its parameters and shipping a run are the
registry's (placeto.methods.registry: `checkpoint_method`, `load_run`, `ship`): this module knows no method.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

from simulator.model.errors import InputError
from simulator.model.io import PathLike

SHIPPED = Path(__file__).resolve().parent / "shipped"
CHECKPOINT = "checkpoint.msgpack"  # in a run directory, beside config.json
DEFAULT_POLICY = "general"  # trained on the wide distribution (placeto.distribution), from list schedules
DEFAULT_GDP = "gdp-general"  # the gdp methods' default: gdp on the wide distribution, from m-ETF


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
    """The run directory a checkpoint argument names.

    A shipped policy's name, a run directory's path, or None (the default policy).
    """
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


def git_commit() -> str:
    """The repository's HEAD commit ("unknown" outside a checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
