"""Graph file format, atomic writes, networkx (placement files: simulator.model.placement_file).

Graph file (JSON, gzip-compressed when the name ends in `.gz`)::

    {"format": "placeto-graph", "version": 1, "name": "...", "meta": {...},
     "nodes": [{"name": "a", "op": "MatMul", "cost": 12.5 | {"k80": 12.5, "cpu": 80.0},
                "out_bytes": [4096], "persistent_bytes": 0, "colocation": null, "attrs": {}}, ...],
     "edges": [{"src": "a", "dst": "b", "out": 0}, ...]}

Writes are atomic (temporary file + rename), and byte-identical for identical graphs.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx
import numpy as np

from simulator.model.errors import InputError
from simulator.model.graph import DEFAULT_KIND, Graph, make_graph
from simulator.model.limits import MAX_INDEX, field as _field, integer
from simulator.model.meta import check_meta, check_meta_fits

FORMAT = "placeto-graph"
VERSION = 1
PathLike = str | os.PathLike
_UMASK = os.umask(0o022)
os.umask(_UMASK)


# ---- bytes on disk ---------------------------------------------------------------------------------------
def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically: readers never see half a file.

    A temporary file in the same folder, then a rename. An OSError (a directory in the way, a read-only or special
    file system, a full disk) becomes a one-line InputError naming `path`; the file at `path`, if any, is then
    unchanged."""
    path = Path(path)
    if path.is_dir():
        raise InputError("cannot write: it is a directory", str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write: {e.strerror or e}", str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_csv(path: PathLike, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> None:
    """Write dict rows as CSV with `atomic_write_bytes`.

    A header, then one row a line (newline line ends). fields: the columns, in order (None: every key of the rows,
    in order of first appearance). NaN floats are written as empty cells."""
    import csv
    import io

    fields = list(fields) if fields is not None else list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    atomic_write_bytes(path, buf.getvalue().encode())


def check_output_path(path: PathLike, directory: bool = False) -> None:
    """Check that a file, or a directory, can be written at `path`.

    Checked before any work, so a bad --out fails at once: `path` must not be a directory (a file) or a
    non-directory (a directory), its nearest existing ancestor must be a directory, and a probe file must be
    creatable there (this catches /proc, read-only mounts, missing permissions). Nothing is left behind.

    Raises:
      InputError: naming `path`, otherwise.
    """
    p = Path(path)
    if not str(path):
        raise InputError("empty output path")
    if directory and p.exists() and not p.is_dir():
        raise InputError("not a directory", str(path))
    if not directory and p.is_dir():
        raise InputError("cannot write: it is a directory", str(path))
    probe_dir = p if directory and p.is_dir() else p.parent
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise InputError(f"cannot write: {probe_dir} is not a directory", str(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=probe_dir, prefix=".placeto-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise InputError(f"cannot write in {probe_dir}: {e.strerror or e}", str(path)) from None


def check_distinct_paths(outputs: Sequence[tuple[str, PathLike | None]],
                         inputs: Sequence[tuple[str, PathLike | None]] = ()) -> None:
    """Check that outputs have their own files, none an input's.

    outputs: (flag, path) pairs, path None when not given; inputs: (what, path) pairs, e.g. ("the graph file",
    "g.json"). `--out X --grouped-out X` would write one result over the other, `place g.json --out g.json` a
    placement over the graph. Paths are compared resolved (symbolic links, `./`, `..` followed).

    Raises:
      InputError: naming the flag and what its path is already.
    """
    seen: dict[str, str] = {os.path.realpath(path): what for what, path in inputs if path}
    for flag, path in outputs:
        if not path:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise InputError(f"{flag} {str(path)[:200]} is {seen[key]}: give each output its own file")
        seen[key] = f"also {flag}"


def write_json(path: PathLike, obj: Any, text: str | None = None) -> None:
    """Atomically write `obj` (or the pre-rendered `text`) as JSON.

    Gzip-compressed (mtime 0) when the name ends in .gz.
    """
    data = (text if text is not None else json.dumps(obj, indent=1) + "\n").encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    atomic_write_bytes(path, data)


def read_json(path: PathLike) -> Any:
    """Read a JSON (or .json.gz) file.

    Raises:
      InputError: one line naming the file, if it cannot be read or is not valid JSON.
    """
    try:
        raw = Path(path).read_bytes()
        if str(path).endswith(".gz"):
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError; a corrupt stream a zlib.error
        raise InputError(f"cannot read: {e}", str(path)) from None
    except RecursionError:
        raise InputError("not valid JSON: nested too deeply", str(path)) from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise InputError(f"not valid JSON: {e}", str(path)) from None
    except MemoryError:
        raise InputError("cannot read: out of memory", str(path)) from None


# ---- graphs ----------------------------------------------------------------------------------------------
def check_file_kind(d: Any, expected: str) -> None:
    """Refuses, in one line, a graph, placement or cluster file given for another of the three.

    Recognised by what only that kind has: a graph file's and a cluster file's "format" ("placeto-graph",
    "placeto-cluster"), a placement file's "placement" list or map. A dictionary of none of them is left to the
    expected kind's own checks.

    Raises:
      InputError: "this is a graph file, not a placement file" (and so on).
    """
    if not isinstance(d, Mapping):
        return
    kind = {FORMAT: "graph", "placeto-cluster": "cluster"}.get(d.get("format") if isinstance(d.get("format"), str)
                                                              else None)
    if kind is None and "placement" in d:
        kind = "placement"
    if kind is not None and kind != expected:
        raise InputError(f"this is a {kind} file, not a {expected} file")


def graph_from_dict(d: Any, source: str | None = None) -> Graph:
    """Parse and validate a graph file's dictionary.

    Raises:
      InputError: naming `source` and the node or field.
    """
    try:
        return _graph_from_dict(d, source)
    except InputError as e:
        raise e.with_source(source) if source else e


def _graph_from_dict(d: Any, source: str | None) -> Graph:
    if not isinstance(d, Mapping):
        raise InputError("top level: expected a JSON object")
    check_file_kind(d, "graph")
    fmt = d.get("format")
    if fmt != FORMAT:
        raise InputError(f"field 'format': expected {FORMAT!r}, got {fmt!r}")
    if d.get("version") != VERSION:
        raise InputError(f"field 'version': unsupported version {d.get('version')!r} (this reads {VERSION})")
    name = _field(d, "name", "top level", str)
    meta = _field(d, "meta", "top level", dict, {})
    check_meta(meta)
    raw_nodes = _field(d, "nodes", "top level", list)
    raw_edges = _field(d, "edges", "top level", list)
    nodes = []
    for i, node in enumerate(raw_nodes):
        where = f"node {node['name']!r}" if isinstance(node, Mapping) and "name" in node else f"node #{i}"
        nm = _field(node, "name", where, str)
        where = f"node {nm!r}"
        cost = _field(node, "cost", where, (int, float, dict))
        out_bytes = _field(node, "out_bytes", where, list)
        nodes.append({
            "name": nm, "op": _field(node, "op", where, str), "cost": cost, "out_bytes": out_bytes,
            "persistent_bytes": _field(node, "persistent_bytes", where, (int, float), 0),
            "colocation": _field(node, "colocation", where, (str, type(None)), None),
            "attrs": _field(node, "attrs", where, dict, {}),
        })
    index = {}
    for i, node in enumerate(nodes):
        index.setdefault(node["name"], i)
    edges = []
    for i, e in enumerate(raw_edges):
        where = f"edge #{i}"
        src, dst = _field(e, "src", where, str), _field(e, "dst", where, str)
        out = integer(_field(e, "out", where, int, 0), f"edge #{i} ({src!r} -> {dst!r}): field 'out'", 0, MAX_INDEX)
        for role, nm in (("src", src), ("dst", dst)):
            if nm not in index:
                raise InputError(f"edge #{i} ({src!r} -> {dst!r}): field {role!r}: unknown node {nm!r}")
        edges.append((index[src], index[dst], out))
    if not nodes:
        raise InputError("field 'nodes': the graph has no nodes (nothing to place)")
    graph = make_graph(name, nodes, edges, meta, source=source)
    check_meta_fits(graph)
    return graph


def _number(x: float) -> int | float:
    """Whole floats as ints: files read naturally, round-trip exactly."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def _node_cost(graph: Graph, i: int) -> float | dict[str, float]:
    present = {k: float(c[i]) for k, c in graph.costs.items() if not math.isnan(c[i])}
    if list(present) == [DEFAULT_KIND]:
        return _number(present[DEFAULT_KIND])
    return {k: _number(v) for k, v in present.items()}


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """A graph's file-format dictionary (inverse of graph_from_dict)."""
    nodes = []
    for i in range(graph.n_nodes):
        node = {"name": graph.names[i], "op": graph.ops[i], "cost": _node_cost(graph, i),
                "out_bytes": [_number(b) for b in graph.out_bytes[graph.out_offsets[i]:graph.out_offsets[i + 1]]]}
        if graph.persistent_bytes[i]:
            node["persistent_bytes"] = _number(graph.persistent_bytes[i])
        if graph.colocation[i] is not None:
            node["colocation"] = graph.colocation[i]
        if graph.attrs[i]:
            node["attrs"] = graph.attrs[i]
        nodes.append(node)
    names = graph.names
    edges = [{"src": names[s], "dst": names[d], "out": int(o)}
             for s, d, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist())]
    return {"format": FORMAT, "version": VERSION, "name": graph.name, "meta": graph.meta,
            "nodes": nodes, "edges": edges}


def dumps_graph(graph: Graph) -> str:
    """Deterministic JSON text: one node or edge per line."""
    d = graph_to_dict(graph)
    dump = lambda x: json.dumps(x, separators=(",", ":"), sort_keys=False, allow_nan=False)  # noqa: E731
    head = {k: d[k] for k in ("format", "version", "name", "meta")}
    lines = [dump(head)[:-1] + ',\n"nodes":[']
    lines.append(",\n".join(dump(n) for n in d["nodes"]))
    lines.append('],\n"edges":[')
    lines.append(",\n".join(dump(e) for e in d["edges"]))
    lines.append("]}\n")
    return "\n".join(lines)


def load_graph(path: PathLike) -> Graph:
    """Read and validate a graph file (.json or .json.gz)."""
    return graph_from_dict(read_json(path), str(path))


def check_readable(graph: Graph, path: PathLike) -> None:
    """Check that `graph`, as save_graph would write it, reads back.

    A command calls it before it writes over a file, so a bad result never replaces it.

    Raises:
      InputError: naming `path`, if the written text would fail load_graph's checks.
    """
    try:
        text = dumps_graph(graph)
    except ValueError as e:  # a NaN or infinity where JSON has none
        raise InputError(f"not written: the result is not a valid graph ({e})", str(path)) from None
    try:
        graph_from_dict(json.loads(text), str(path))
    except InputError as e:
        raise InputError(f"not written: the result is not a valid graph ({e.detail})", str(path)) from None


def save_graph(graph: Graph, path: PathLike) -> None:
    """Write `graph` atomically; identical graphs give identical bytes.

    Gzip-compressed when `path` ends in .gz.
    """
    write_json(path, None, text=dumps_graph(graph))


# ---- networkx ------------------------------------------------------------------------------------------
def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """`graph` as a networkx MultiDiGraph: one edge per graph edge.

    Node attributes: op, cost, out_bytes, persistent_bytes, colocation, attrs; edge attributes: out, index.
    """
    g = nx.MultiDiGraph(name=graph.name, meta=graph.meta)
    for i, nm in enumerate(graph.names):
        lo, hi = graph.out_offsets[i], graph.out_offsets[i + 1]
        g.add_node(nm, op=graph.ops[i], cost=_node_cost(graph, i), out_bytes=graph.out_bytes[lo:hi].tolist(),
                   persistent_bytes=float(graph.persistent_bytes[i]), colocation=graph.colocation[i],
                   attrs=graph.attrs[i])
    for e, (s, d, o) in enumerate(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist())):
        g.add_edge(graph.names[s], graph.names[d], out=o, index=e)
    return g


def from_networkx(g: nx.DiGraph | nx.MultiDiGraph, name: str | None = None) -> Graph:
    """Inverse of to_networkx.

    Missing attributes default to: cost 0, one output of 0 bytes, out 0. Edges keep the order of their `index`
    attribute where present (networkx groups edges by source node)."""
    nodes, index = [], {}
    for nm, data in g.nodes(data=True):
        index[nm] = len(nodes)
        nodes.append({"name": str(nm), "op": data.get("op", ""), "cost": data.get("cost", 0.0),
                      "out_bytes": data.get("out_bytes", [0]), "persistent_bytes": data.get("persistent_bytes", 0),
                      "colocation": data.get("colocation"), "attrs": data.get("attrs", {})})
    ordered = sorted(enumerate(g.edges(data=True)), key=lambda e: (e[1][2].get("index", e[0]), e[0]))
    edges = [(index[s], index[d], int(data.get("out", 0))) for _, (s, d, data) in ordered]
    return make_graph(name or g.graph.get("name", "graph"), nodes, edges, g.graph.get("meta", {}))


# ---- placements (the file format: simulator.model.placement_file) ------------------------------------------------
def check_placement(assignment: Sequence[int] | np.ndarray, graph: Graph | None, n_devices: int | None) -> None:
    """Check a placement's length and device indices in [0, n_devices).

    Raises:
      InputError: naming the graph or the first node with a bad index.
    """
    a = np.asarray(assignment)
    if graph is not None and a.shape != (graph.n_nodes,):
        raise InputError(f"placement has {a.size} entries but graph {graph.name!r} has {graph.n_nodes} nodes")
    bad = np.flatnonzero((a < 0) | (a >= (n_devices if n_devices is not None else np.inf)))
    if bad.size:
        node = graph.names[bad[0]] if graph is not None else f"#{bad[0]}"
        raise InputError(f"node {node!r}: device index {int(a[bad[0]])} out of range for {n_devices} devices")
