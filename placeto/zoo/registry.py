"""Program kinds by name, and the benchmark programs of the Placeto evaluation."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from placeto.zoo.common import Program
from placeto.zoo.enas_cifar10 import build_cifar10
from placeto.zoo.enas_ptb import build_ptb
from placeto.zoo.inception_v3 import build_inception_v3
from placeto.zoo.nasnet import build_nasnet
from placeto.zoo.nmt import build_nmt
from placeto.zoo.rnnlm import build_rnnlm

PROGRAMS: dict[str, Callable[..., Program]] = {
    "cifar10": build_cifar10,
    "ptb": build_ptb,
    "nmt": build_nmt,
    "rnnlm": build_rnnlm,
    "inception_v3": build_inception_v3,
    "nasnet": build_nasnet,
}


def build_program(kind: str, **kwargs: Any) -> Program:
    """Build a program of `kind` (a key of PROGRAMS); kwargs go to its builder (`seed`, config fields).

    Raises:
        KeyError: for an unknown kind.
    """
    if kind not in PROGRAMS:
        raise KeyError(f"unknown program kind {kind!r}; expected one of {sorted(PROGRAMS)}")
    return PROGRAMS[kind](**kwargs)


@dataclasses.dataclass(frozen=True)
class ProgramSpec:
    """A named program: `build_program(spec.kind, **spec.kwargs)`."""

    name: str
    """Benchmark name, e.g. "nmt_l4"."""
    kind: str
    """Key of PROGRAMS."""
    kwargs: Mapping[str, Any]
    """Builder arguments (seed and config-field overrides); JSON-serialisable."""

    def build(self) -> Program:
        """The program, renamed to `self.name`."""
        return dataclasses.replace(build_program(self.kind, **self.kwargs), name=self.name)


def list_benchmarks() -> list[ProgramSpec]:
    """The Placeto benchmarks at this repository's default (reduced-width) sizes.

    Inception-V3 at batch 32; NMT with 2/4/8 encoder and decoder layers (length 30, batch 64);
    RNNLM with 2/4/8 layers (20 steps, batch 64); NASNet-A (N = 4, batch 32).
    """
    specs = [ProgramSpec("inception_v3", "inception_v3", {"seed": 0, "batch": 32})]
    specs += [ProgramSpec(f"nmt_l{n}", "nmt", {"seed": 0, "layers": n}) for n in (2, 4, 8)]
    specs += [ProgramSpec(f"rnnlm_l{n}", "rnnlm", {"seed": 0, "layers": n, "batch": 64}) for n in (2, 4, 8)]
    specs.append(ProgramSpec("nasnet", "nasnet", {"seed": 0}))
    return specs


def build_benchmark(name: str) -> Program:
    """The benchmark program called `name` (see `list_benchmarks`).

    Raises:
        KeyError: for an unknown benchmark name.
    """
    for spec in list_benchmarks():
        if spec.name == name:
            return spec.build()
    raise KeyError(f"unknown benchmark {name!r}; expected one of {[s.name for s in list_benchmarks()]}")
