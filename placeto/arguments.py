"""Command-line argument types with ranges, and a parser whose errors are one line.

Every number the CLI takes is range-checked when parsed (so `--seed 99999999999999999999999` is a usage error,
not an OverflowError deep in JAX), and argparse's usage errors print one line, `placeto train: error: ...`, with
exit status 2 like every other bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Callable

from simulator.cluster import PRESETS, Cluster, cluster_preset, load_cluster
from simulator.limits import MAX_DEVICES, MAX_SEED


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line on stderr (no usage block), exit status 2."""

    def error(self, message: str):  # noqa: D102  (argparse's hook)
        text = " ".join(message.split())
        sys.stderr.write(f"{self.prog}: error: {text} (see {self.prog} --help)\n")
        sys.exit(2)


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi], checked on the digits (no huge int is built)."""

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        if not digits.isdigit() or len(digits) > 30:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {text[:40]!r}")
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse type: a finite float in [lo, hi]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in [{lo:g}, {hi:g}], got {text[:40]!r}") from None
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"expected a number in [{lo:g}, {hi:g}], got {text[:40]!r}")
        return value

    parse.__name__ = "number"
    return parse


def comma_list(item: Callable[[str], object]) -> Callable[[str], list]:
    """An argparse type: comma-separated values, each parsed by `item` (e.g. int_in(1, 8)); at least one."""

    def parse(text: str) -> list:
        parts = [t for t in text.split(",") if t.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text[:40]!r}")
        return [item(t) for t in parts]

    parse.__name__ = f"comma-separated {getattr(item, '__name__', 'value')}s"
    return parse


DEVICES = int_in(1, MAX_DEVICES)


def device_spec(text: str):
    """An argparse type: a device count or a platform:index list (simulator.host_devices.parse_device_spec),
    its error naming the offending entry."""
    from simulator.host_devices import parse_device_spec

    try:
        return parse_device_spec(text)
    except ValueError as e:  # InputError: argparse would print only "invalid value"
        raise argparse.ArgumentTypeError(str(e).removeprefix("--devices: ")) from None


device_spec.__name__ = "device spec"
DEVICE_SPEC = device_spec  # local devices: "2", "gpu:0,cpu:0", "cpu:0,cpu:1"
SEED = int_in(0, MAX_SEED)
COUNT = int_in(0, 10**9)  # episodes, samples, warm-up runs
POSITIVE = int_in(1, 10**9)  # repeats, groups, budgets
WORKERS = int_in(1, 1024)
MINUTES = float_in(0.0, 1e7)
PERCENT = float_in(0.0, 1e6)  # a bound in percent (--max-cp-growth)


def add_cluster_arguments(p: argparse.ArgumentParser, default_devices: int | None = 2,
                          device_list: bool = False) -> None:
    """--devices N / --preset NAME / --cluster FILE, shared by every command that simulates. With `device_list`,
    --devices also takes local devices as a platform:index list (DEVICE_SPEC, e.g. gpu:0,cpu:0: `place
    --hardware`); cluster_from_args then takes the preset with that many devices."""
    p.add_argument("--devices", type=DEVICE_SPEC if device_list else DEVICES, default=default_devices,
                   help="number of devices of the preset" + (", or local devices as platform:index, e.g. "
                                                             "gpu:0,cpu:0" if device_list else ""))
    p.add_argument("--preset", default="placeto-k80", choices=sorted(PRESETS), help="cluster preset")
    p.add_argument("--cluster", help="cluster JSON file (overrides --preset/--devices)")


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    if getattr(args, "cluster", None):
        return load_cluster(args.cluster)
    devices = args.devices if isinstance(args.devices, int) or args.devices is None else len(args.devices)
    return cluster_preset(args.preset, devices)
