"""Program kinds by name, and the Placeto evaluation's benchmarks."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

from simulator.workloads.zoo.cnn import CNNConfig, build_cnn
from simulator.workloads.zoo.common import Program
from simulator.workloads.zoo.enas_cifar10 import Cifar10Config, build_cifar10
from simulator.workloads.zoo.enas_ptb import PTBConfig, build_ptb
from simulator.workloads.zoo.inception_v3 import InceptionConfig, build_inception_v3
from simulator.workloads.zoo.matmul_chain import MatmulConfig, build_matmul
from simulator.workloads.zoo.mlp import MLPConfig, build_mlp
from simulator.workloads.zoo.moe import MoEConfig, build_moe
from simulator.workloads.zoo.nasnet import NASNetConfig, build_nasnet
from simulator.workloads.zoo.nmt import NMTConfig, build_nmt
from simulator.workloads.zoo.rnnlm import RNNLMConfig, build_rnnlm
from simulator.workloads.zoo.transformer import TransformerConfig, build_transformer
from simulator.model.errors import InputError
from simulator.model.limits import MAX_SEED, short_repr
from simulator.workloads.family_samplers import SAMPLERS

PROGRAMS: dict[str, Callable[..., Program]] = {
    "cifar10": build_cifar10,
    "ptb": build_ptb,
    "nmt": build_nmt,
    "rnnlm": build_rnnlm,
    "inception_v3": build_inception_v3,
    "nasnet": build_nasnet,
    "transformer": build_transformer,
    "mlp": build_mlp,
    "matmul": build_matmul,
    "moe": build_moe,
    "cnn": build_cnn,
}


CONFIGS: dict[str, type] = {"cifar10": Cifar10Config, "ptb": PTBConfig, "nmt": NMTConfig, "rnnlm": RNNLMConfig,
                            "inception_v3": InceptionConfig, "nasnet": NASNetConfig,
                            "transformer": TransformerConfig, "mlp": MLPConfig, "matmul": MatmulConfig,
                            "moe": MoEConfig, "cnn": CNNConfig}
MAX_SIZE = 65536  # largest integer config field (a width, length, batch or count) accepted from a graph file
SIZE_BUDGET = 4.0  # a graph file's program may be at most this many times the largest the project builds (below)
REFERENCE_DRAWS = 2000  # draws of a family's sampler that find the largest value of each field it builds


def build_program_from_data(kind: Any, kwargs: Any, where: str = "meta.program") -> Program:
    """`build_program` for a kind and arguments read from a data file.

    The data file is a graph's meta; `check_program_args` runs first.

    Raises:
        InputError: if the check fails, or the builder raises TypeError, ValueError or ZeroDivisionError.
    """
    check_program_args(kind, kwargs, where)
    try:
        return build_program(kind, **kwargs)
    except (TypeError, ValueError, ZeroDivisionError) as e:  # a combination the builder cannot make
        raise InputError(f"{where}: the {kind!r} program cannot be built with these arguments: {e}") from None


def check_program_args(kind: Any, kwargs: Any, where: str = "meta.program") -> None:
    """Check that (kind, kwargs) names a zoo program of a sensible size.

    Only the zoo's own builders can run: `kind` must be a key of PROGRAMS, and `kwargs` may hold `seed` (an
    integer in [0, 2^32)) and scalar fields of the kind's config dataclass, each of the field's type (integers in
    [1, MAX_SIZE], floats in (0, MAX_SIZE], booleans). The program must also be about as large as the ones the
    project builds (`reference_sizes`): a float field at most the largest built (mlp's taper and inception's width
    grow sizes geometrically), and the integer fields together at most SIZE_BUDGET times it (the product of each
    field's ratio to the largest built, where above 1), so a graph file cannot ask for a model that traces for
    minutes or fills the memory.

    Raises:
        InputError: naming `where`, otherwise.
    """
    if not isinstance(kind, str) or kind not in PROGRAMS:
        raise InputError(f"{where}.kind: unknown program kind {short_repr(kind)} (known: {', '.join(PROGRAMS)})")
    if not isinstance(kwargs, Mapping):
        raise InputError(f"{where}.kwargs: expected an object")
    fields = {f.name: f for f in dataclasses.fields(CONFIGS[kind])}
    for key, value in kwargs.items():
        at = f"{where}.kwargs.{str(key)[:40]}"
        default = 0 if key == "seed" else fields[key].default if key in fields else None
        if key == "seed":
            ok = type(value) is int and 0 <= value <= MAX_SEED
        elif type(default) is int:
            ok = type(value) is int and 1 <= value <= MAX_SIZE
        elif type(default) is float:
            ok = type(value) in (int, float) and 0 < value <= MAX_SIZE and math.isfinite(value)  # huge ints first
        elif type(default) is bool:
            ok = type(value) is bool
        else:
            raise InputError(f"{at}: not an argument of the {kind!r} program (allowed: seed, "
                             f"{', '.join(k for k, f in fields.items() if type(f.default) in (int, float, bool))})")
        if not ok:
            raise InputError(f"{at}: bad value {short_repr(value)} for a field of type {type(default).__name__}")
    _check_size(kind, kwargs, where)


def _check_size(kind: str, kwargs: Mapping[str, Any], where: str) -> None:
    """The size rule of check_program_args (types already checked)."""
    largest = reference_sizes(kind)
    growth, grown = 1.0, []
    for key, value in kwargs.items():
        if key == "seed" or type(value) is bool or key not in largest:
            continue
        ratio = value / largest[key]
        if isinstance(value, float) and ratio > 1:
            raise InputError(f"{where}.kwargs.{key}: {value:g} is larger than any {kind!r} program the project "
                             f"builds (at most {largest[key]:g})")
        if ratio > 1:
            growth *= ratio
            grown.append(f"{key} {value} > {largest[key]:g}")
    if growth > SIZE_BUDGET:
        raise InputError(f"{where}.kwargs: asks for a {kind!r} program {growth:.3g}x the largest the project builds "
                         f"({', '.join(grown)}; at most {SIZE_BUDGET:g}x in all)")


@functools.cache
def reference_sizes(kind: str) -> dict[str, float]:
    """The largest built value of each numeric config field of `kind`.

    Its default, the benchmarks' (list_benchmarks) and its family's (simulator.workloads.family_samplers.SAMPLERS,
    REFERENCE_DRAWS seeded draws).
    """
    import numpy as np

    largest = {f.name: f.default for f in dataclasses.fields(CONFIGS[kind])
               if type(f.default) in (int, float)}
    built = [spec.kwargs for spec in list_benchmarks() if spec.kind == kind]
    if kind in SAMPLERS:
        rng = np.random.default_rng(0)
        built += [SAMPLERS[kind](rng) for _ in range(REFERENCE_DRAWS)]
    for kwargs in built:
        for key, value in kwargs.items():
            if key in largest and type(value) in (int, float):
                largest[key] = max(largest[key], value)
    return largest


def build_program(kind: str, **kwargs: Any) -> Program:
    """A program of `kind` (a key of PROGRAMS), built.

    kwargs go to its builder (`seed`, config fields).

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
    """The Placeto benchmarks at the repository's reduced-width sizes.

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
