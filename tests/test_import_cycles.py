"""No import cycle in placeto/ or simulator/: every import (module level or inside a function, relative ones
resolved) is an edge of the module graph; a strongly connected component of more than one module is a cycle.

`from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`; a package's __init__.py is
the package module. A string constant that names a module ("pkg.mod", or "pkg.mod:Name" as placeto.rollouts.workers'
worker kinds) is an edge too: it is loaded with importlib (the method registry, the rollout workers), and a
dependency loaded by name is still a dependency. Importing `a.b.c` also runs `a` and `a.b`, but those edges are not counted: a package
__init__ that imports its own submodules would otherwise close a loop with every submodule that imports a
sibling, and what matters here is which module needs which.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placeto", "simulator")


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module of a (possibly relative) `from ... import` in `module`."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The known modules that `module` (file `path`) imports anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            name = node.value.partition(":")[0]  # importlib by string: "pkg.mod" or "pkg.mod:Class"
            if name not in known or name == module:  # its own name (a WORKER constant) is no import
                continue
            targets = [name]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.X` where X is not a module: a.b
                t = t.rpartition(".")[0]
            if t:
                out.add(t)
    return out


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    files = module_files(root, packages)
    known = set(files)
    return {m: imports_of(m, p, known) for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or with a self-loop (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.get(v, ()):
                    out.append(sorted(comp))
    return sorted(out)


def _describe(graph: dict[str, set[str]], comp: list[str]) -> str:
    members = set(comp)
    edges = [f"    {a} -> {b}" for a in comp for b in sorted(graph[a] & members)]
    return f"  {len(comp)} modules: {', '.join(comp)}\n" + "\n".join(edges)


def test_cycle_finder_on_a_synthetic_graph():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}, "x": {"y"}, "y": {"x"}}
    assert cycles(g) == [["a", "b", "c"], ["e"], ["x", "y"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_resolution_on_a_synthetic_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .one import thing\n")
    (pkg / "sub" / "one.py").write_text("def f():\n    from ..two import g\n")
    (pkg / "two.py").write_text("from pkg.sub import one\nimport pkg.sub.one as o\nfrom pkg import sub\n")
    (pkg / "three.py").write_text('KIND = "pkg.two:Thing"\nNOT_A_MODULE = "pkg.two.Thing"\n')
    g = import_graph(tmp_path, ("pkg",))
    assert g["pkg.sub"] == {"pkg.sub.one"}
    assert g["pkg.sub.one"] == {"pkg.two"}  # inside a function, relative, `from pkg import name` with name a def
    assert g["pkg.two"] == {"pkg.sub.one", "pkg.sub"}
    assert g["pkg.three"] == {"pkg.two"}  # a module loaded by importlib from its name
    assert cycles(g) == [["pkg.sub", "pkg.sub.one", "pkg.two"]]


METHODS = ("placeto.methods.placeto", "placeto.methods.gdp", "placeto.methods.rnn", "placeto.methods.hierarchical")
# the only modules outside a method's package that import one: the registry (it loads them all), the per-graph
# methods' spec lookup (rnn and hierarchical share their run directory code), and the demo (it shows the default
# policy's own guided placement)
REACH_INTO_METHODS = {"placeto.methods.registry", "placeto.methods.sequence.specs", "placeto.cli.demo"}


def _method_of(module: str) -> str | None:
    return next((m for m in METHODS if module == m or module.startswith(m + ".")), None)


def test_methods_meet_only_through_the_registry():
    """No method imports another, and what they share (features, gnn, checkpoints, objective, workers, ...)
    imports none of them."""
    graph = import_graph()
    assert all(m in graph for m in METHODS)
    bad = [f"{a} -> {b}" for a in sorted(graph) if a not in REACH_INTO_METHODS for b in sorted(graph[a])
           if _method_of(b) is not None and _method_of(b) != _method_of(a)]
    assert not bad, "imports of a method package from outside it:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(graph, c) for c in found)
