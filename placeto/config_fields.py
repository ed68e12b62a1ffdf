"""What the learned methods' configs share: checks, `--set` parsing.

Field types and ranges are checked on construction, and `--set FIELD=VALUE` items are parsed into typed field
values. Each method's config (a frozen dataclass) brings its own ranges.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def check_types_and_ranges(config: Any, ranges: dict[str, tuple[float, float]]) -> None:
    """Check each field of `config` for its default's type and its range.

    Args:
      config: a frozen dataclass; an int where a float is due is taken (and stored as a float).
      ranges: {field: (lo, hi)}, inclusive; NaN and infinities are out of every range.

    Raises:
      ValueError: naming the field.
    """
    name = type(config).__name__
    for f in dataclasses.fields(config):
        value, kind = getattr(config, f.name), type(f.default)
        ok = type(value) is kind or (kind is float and type(value) is int)
        if not ok:
            shown = "a huge integer" if type(value) is int and abs(value) > 10**30 else repr(value)[:40]
            raise ValueError(f"{name}: field {f.name!r}: {shown} is not of type {kind.__name__}")
        if kind is float and type(value) is int and abs(value) > 2**1023:  # float() would raise OverflowError
            raise ValueError(f"{name}: field {f.name!r}: a huge integer is out of range")
        if kind is float:
            object.__setattr__(config, f.name, value := float(value))
        if f.name in ranges:
            lo, hi = ranges[f.name]
            if not (lo <= value <= hi and (kind is int or math.isfinite(value))):  # no float() of a huge int
                shown = "a huge integer" if type(value) is int and abs(value) > 10**30 else repr(value)
                raise ValueError(f"{name}: field {f.name!r}: {shown} is out of range [{lo:.10g}, {hi:.10g}]")


RETIRED_FIELDS = ("memory_penalty_per_gb", "oom_penalty")
"""Fields configs no longer have: the memory penalties the feasibility-first objective (placeto.objective)
replaced. A stored config that names one still loads; its value no longer changes anything."""


def without_retired(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of config dictionary `d` without RETIRED_FIELDS."""
    return {k: v for k, v in d.items() if k not in RETIRED_FIELDS}


def parse_overrides(items: list[str], cls: type) -> dict[str, Any]:
    """Parse `--set` items ("gamma=0.5", ...) into `cls`'s field values.

    Raises:
      ValueError: naming the bad item.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(fields))}")
        kind = type(getattr(cls(), key))
        try:
            if kind is bool:
                if text.lower() not in ("1", "0", "true", "false"):
                    raise ValueError(text)
                out[key] = text.lower() in ("1", "true")
            else:
                out[key] = kind(text)
        except ValueError:
            raise ValueError(f"--set {item!r}: {key} takes a value of type {kind.__name__}") from None
    return out


FLAG_FIELDS = ("episodes", "seed", "time_limit_minutes", "init_from", "progress", "checkpoint_seconds", "log_every",
               "devices")
"""Fields a `placeto train` command sets through its own flags (or that do not change what is learned)."""


def pinned_overrides(stored: Any, current: Any, command: str = "") -> list[str]:
    """"FIELD=VALUE" items pinning config `stored` against today's.

    Returns the fields of config `stored` that differ from config `current` (the same dataclass: today's
    defaults), leaving out FLAG_FIELDS and fields `command` already sets with --set. Appended to a run's recorded
    command as --set, they make it train what it trained then, whatever the defaults now.
    """
    out = []
    for f in dataclasses.fields(stored):
        value = getattr(stored, f.name)
        if f.name in FLAG_FIELDS or value == getattr(current, f.name) or f" {f.name}=" in f" {command}":
            continue
        out.append(f"{f.name}={str(value).lower() if isinstance(value, bool) else value}")
    return out
