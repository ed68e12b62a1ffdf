"""The method -> colour map (placeto.harness.plot_style): every method name the code can put in a plot has its own colour,
no two colours are hard to tell apart, learned methods are set apart, unknown names get distinct fallbacks."""

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

from placeto.harness import plot_style

ROOT = Path(__file__).resolve().parents[3]
# module-level lists of method names in the experiments that plot methods (read from their source, not imported:
# some import every learned method)
EXPERIMENT_LISTS = {"benchmarks/anytime.py": ("METHODS",), "reproduce/sample_efficiency.py": ("METHODS",),
                    "reproduce/gdp_family.py": ("LARGE_METHODS",), "reproduce/paper_table.py": ("METHODS",),
                    "reproduce/passes.py": ("METHODS",),
                    "benchmarks/sim_vs_hardware.py": ("FIXED_METHODS", "SEARCH_METHODS")}


def _lab(hex_color: str) -> np.ndarray:
    """CIE L*a*b* (D65) of an sRGB colour."""
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(hex_color))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _module_lists(path: Path, names: tuple[str, ...]) -> list[str]:
    """The string elements (or keys) of the module-level constants `names` of a Python file."""
    out = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            value = ast.literal_eval(node.value)
            out += list(value)
    return out


def _tuple_names(path: Path, function: str) -> list[str]:
    """The names of the `(name, placement)` tuples a function builds: string first elements, and f-strings with a
    constant prefix ("policy-{name}") as that prefix + "x"."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out.append(first.value)
            elif isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant):
                out.append(first.values[0].value + "x")
    return out


def _candidate_names() -> list[str]:
    """The literal names placeto.harness.on_hardware gives its candidates (`Candidate("single device", ...)`)."""
    tree = ast.parse((ROOT / "placeto" / "harness" / "on_hardware.py").read_text())
    return [c.args[0].value for c in ast.walk(tree) if isinstance(c, ast.Call) and getattr(c.func, "id", "") ==
            "Candidate" and c.args and isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str)]


def plotted_names() -> set[str]:
    """Every method name a plot can show, computed from the code."""
    from placeto.baselines import METHODS
    from placeto.harness.compare import LEARNED, PER_GRAPH
    from placeto.cli.demo import simple_placements
    from placeto.methods import registry

    names = set(METHODS) | set(LEARNED) | set(PER_GRAPH) | set(registry.all_variants()) | set(registry.names())
    names |= set(simple_placements(4, np.arange(4), 2, 0)) | set(_candidate_names())
    for file, lists in EXPERIMENT_LISTS.items():
        found = _module_lists(ROOT / "experiments" / file, lists)
        assert found, f"experiments/{file}: no {lists}"
        names |= set(found)
    names |= set(_tuple_names(ROOT / "experiments" / "benchmarks" / "sim_vs_hardware.py", "placements"))
    return names


def test_every_plotted_name_has_its_own_colour():
    names = plotted_names()
    assert {"single device", "placeto-finetuned", "gdp fine-tuned", "round-robin", "random-search", "uniform",
            "policy-x"} <= names
    unnamed = sorted(n for n in names if plot_style.canonical(n) is None)
    assert not unnamed, f"no colour in placeto.harness.plot_style.COLORS for {unnamed}"
    # distinct names that are not spellings of one method have distinct colours
    methods = {plot_style.canonical(n) for n in names}
    assert len({plot_style.color(m) for m in methods}) == len(methods)


def test_colours_are_far_apart():
    palette = {**plot_style.COLORS, **{f"fallback {i}": c for i, c in enumerate(plot_style.FALLBACK)}}
    close = [(a, b, round(float(np.linalg.norm(_lab(x) - _lab(y))), 1))
             for (a, x), (b, y) in itertools.combinations(palette.items(), 2)
             if np.linalg.norm(_lab(x) - _lab(y)) < plot_style.MIN_DELTA_E]
    assert not close, f"colours closer than {plot_style.MIN_DELTA_E} (CIE76): {close}"
    named = [(a, b) for (a, x), (b, y) in itertools.combinations(plot_style.COLORS.items(), 2)
             if np.linalg.norm(_lab(x) - _lab(y)) < plot_style.MIN_NAMED_DELTA_E]
    assert not named, f"named colours closer than {plot_style.MIN_NAMED_DELTA_E} (CIE76): {named}"
    for a, b in (("scotch", "random"), ("etf", "m-sct")):  # pairs users could not tell apart before
        assert np.linalg.norm(_lab(plot_style.COLORS[a]) - _lab(plot_style.COLORS[b])) > 2 * plot_style.MIN_DELTA_E


def test_learned_set_apart():
    from placeto.baselines import METHODS
    from placeto.harness.compare import LEARNED, PER_GRAPH

    assert all(plot_style.is_learned(m) for m in (*LEARNED, *PER_GRAPH))
    assert not any(plot_style.is_learned(m) for m in METHODS)
    assert plot_style.bar_style("gdp-search")["edgecolor"] == "black"
    assert plot_style.bar_style("metis")["edgecolor"] != "black"
    assert plot_style.line_style("placeto")["linewidth"] > plot_style.line_style("sa")["linewidth"]
    assert plot_style.line_style("sa")["linestyle"] == "--"


@pytest.mark.parametrize("label, name", [("Single device", "single"), ("gdp zero-shot", "gdp"),
                                         ("gdp fine-tuned", "gdp-finetuned"), ("random-search", "random"),
                                         ("/tmp/p/nmt_004.2dev.m-sct.json", "m-sct"), ("local_search", "local-search"),
                                         ("nmt_004.4dev.placeto-search.json.gz", "placeto-search"),
                                         ("best.json", None), ("my-method", None)])
def test_canonical(label, name):
    assert plot_style.canonical(label) == name


def test_unknown_names_get_distinct_fallbacks():
    unknown = [f"method{i}" for i in range(8)]
    assert plot_style.color("method0") == plot_style.color("method0") in plot_style.FALLBACK
    mapping = plot_style.colors(["etf", *unknown, "placeto"])
    assert mapping["etf"] == plot_style.COLORS["etf"] and mapping["placeto"] == plot_style.COLORS["placeto"]
    assert len(set(mapping.values())) == len(mapping)
    assert not set(plot_style.FALLBACK) & set(plot_style.COLORS.values())
