"""One colour per method, the same in every plot that shows methods.

Compare's bar chart, eval's measured against simulated, the experiments' curves: a method reads the same
everywhere. Learned methods have saturated warm hues (reds, oranges, pinks, browns, gold) and are drawn with a
black outline (bars) or a thick solid line; classical baselines have muted or cool hues (greys, blues, purples,
cyans, greens) and thin dashed lines. Every name a plot can show has its own colour
(tests/placeto/harness/test_plot_style.py computes those names from placeto.baselines, the method registry, compare
and the experiments, and checks that no two colours are closer than MIN_DELTA_E); any other name gets one of
FALLBACK, chosen by a hash of the name, never a named colour.

Kept free of heavy imports (no JAX, no method modules): the experiments import it from their plotting functions.
"""

from __future__ import annotations

import re
import zlib
from pathlib import PurePath
from typing import Iterable

LEARNED = {  # saturated warm hues
    "placeto": "#d62728",
    "placeto-search": "#ff7f0e",
    "placeto-finetuned": "#ff9896",
    "gdp": "#e377c2",
    "gdp-search": "#a3195b",
    "gdp-finetuned": "#f7b6d2",
    "rnn": "#8c564b",
    "hierarchical": "#e6ab02",
}
CLASSICAL = {  # muted or cool hues, grouped: trivial (greys), partitioners (blues), list schedulers (purples,
    # teal, cyan), random (light and mid blue-cyan), searches (greens), the human expert (olive); any two at least
    # MIN_NAMED_DELTA_E apart, so that e.g. scotch and random, etf and m-sct read apart at a glance
    "single": "#7f7f7f",
    "cpu-only": "#c7c7c7",
    "round-robin": "#4d4d4d",
    "contiguous": "#252525",
    "metis": "#1f77b4",
    "scotch": "#4361ee",
    "mincut": "#08306b",
    "etf": "#9467bd",
    "m-sct": "#00bfa0",
    "m-topo": "#54278f",
    "pipeline-dp": "#337755",
    "heft": "#17becf",
    "random": "#9edae5",
    "uniform": "#67a9cf",
    "local-search": "#2ca02c",
    "sa": "#98df8a",
    "expert": "#bcbd22",
}
COLORS = {**LEARNED, **CLASSICAL}
# other spellings the CLI, the experiments and eval's placement names use (after `_normal`)
ALIASES = {
    "single-device": "single", "single-gpu": "single", "random-search": "random", "human": "expert",
    "human-expert": "expert", "gdp-zero-shot": "gdp", "placeto-zero-shot": "placeto",
    "trained": "placeto",  # experiments/benchmarks/sim_vs_hardware.py: the Placeto policy of --checkpoints
}
# for names without a colour: each at least MIN_DELTA_E from every named colour (tested); black is left out (it
# draws reference lines) and so are colours too pale to see on white
FALLBACK = ("#5254a3", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c", "#8c6d31", "#bd9e39", "#e7cb94",
            "#ad494a", "#7b4173", "#a55194", "#de9ed6", "#00441b", "#67000d", "#014636", "#525200", "#80cdc1",
            "#35978f", "#bf812d")
MIN_DELTA_E = 15.0  # least CIE76 distance between two colours of the map (about 2.3 is "just noticeable")
MIN_NAMED_DELTA_E = 18.0  # least CIE76 distance between two named methods' colours (they share plots most)
LEARNED_NOTE = "black outline: learned method"  # what the bars' outline means, for legends
LEARNED_LINE_NOTE = "solid thick line: learned method, dashed: classical"
LOG_SPAN = 10.0  # bars whose largest value is more than this many times their smallest get a log value axis


def _normal(label: str) -> str:
    s = re.sub(r"[\s_]+", "-", str(label).strip().lower())
    return s.replace("fine-tuned", "finetuned")


def canonical(label: str) -> str | None:
    """The method a plot label names, or None.

    The label itself in any case or spacing ("Single device", "gdp fine-tuned"), an alias ("random-search"), or
    the method part of a placement file name as compare and place write them (`<graph>.<D>dev.<method>.json`).
    """
    stem = PurePath(str(label)).name
    for suffix in (".gz", ".json"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    for candidate in (str(label), stem, stem.rsplit(".", 1)[-1]):
        s = _normal(candidate)
        if s in COLORS:
            return s
        if s in ALIASES:
            return ALIASES[s]
        if s.startswith("policy-"):  # a shipped Placeto policy by name (experiments/benchmarks/sim_vs_hardware.py)
            return "placeto"
    return None


def is_learned(label: str) -> bool:
    return canonical(label) in LEARNED


def color(label: str) -> str:
    """The method's colour (hex), else a FALLBACK one by name hash.

    The hash (crc32) is deterministic across runs and machines, unlike Python's hash.
    """
    name = canonical(label)
    if name is not None:
        return COLORS[name]
    return FALLBACK[zlib.crc32(str(label).encode()) % len(FALLBACK)]


def colors(labels: Iterable[str]) -> dict[str, str]:
    """{label: colour} for one plot's labels, fallbacks distinct.

    The named colours, and distinct fallbacks for the others (the hash's pick, else the next unused one, as long
    as FALLBACK lasts).
    """
    out, used = {}, set()
    labels = list(dict.fromkeys(labels))
    for label in labels:
        if canonical(label) is not None:
            out[label] = color(label)
    used = set(out.values())
    for label in labels:
        if label in out:
            continue
        start = FALLBACK.index(color(label))
        free = [FALLBACK[(start + k) % len(FALLBACK)] for k in range(len(FALLBACK))]
        out[label] = next((c for c in free if c not in used), free[0])
        used.add(out[label])
    return out


def bar_style(label: str, face: str | None = None) -> dict:
    """`ax.bar`/`ax.barh` keywords: colour, black outline if learned."""
    face = face or color(label)
    if is_learned(label):
        return dict(facecolor=face, edgecolor="black", linewidth=1.4)
    return dict(facecolor=face, edgecolor="white", linewidth=0.5)


def wants_log_axis(values: Iterable[float]) -> bool:
    """Whether bars of these heights need a log axis to stay readable.

    True when the largest positive finite value is more than LOG_SPAN times the smallest: on a linear axis the
    short bars (e.g. the single GPU's 3 ms beside a placement on the host CPU's 180 ms) would be flat.
    """
    shown = [float(v) for v in values if 0 < float(v) < float("inf")]
    return bool(shown) and max(shown) > LOG_SPAN * min(shown)


def line_style(label: str, face: str | None = None) -> dict:
    """`ax.plot`/`ax.step` keywords: colour, thick and solid if learned.

    Thinner and dashed for a classical method.
    """
    face = face or color(label)
    if is_learned(label):
        return dict(color=face, linewidth=2.2, linestyle="-")
    return dict(color=face, linewidth=1.4, linestyle="--")


def legend_outside(ax, entries: int, fontsize: float = 8, **kwargs):
    """A legend right of the axes for more than 6 entries, else inside.

    Inside, where it fits best. Outside, the figure must be laid out with tight_layout or constrained layout so
    the legend stays on the canvas.
    """
    if entries > 6:
        return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=fontsize,
                         **kwargs)
    return ax.legend(fontsize=fontsize, **kwargs)
