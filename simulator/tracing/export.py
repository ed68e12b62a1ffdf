"""A traced program saved beside its graph file, to run from files.

So `eval --hardware` and `profile` run it from the files alone. `placeto import-jax --export` writes, next to each
graph file `G.json[.gz]`, the file `G.export.zip` (see `export_path`): every unit of the graph (an op, or a group of
a grouped graph) as a `jax.export` artefact (serialized StableHLO: no Python, nothing to import), plus what is
needed to wire the units together::

    manifest.json   {"format": "placeto-export", "version": 1, "graph": name, "fingerprint": sha256 of the
                     graph's node names and edges, "n_ops": N, "platforms": ["cpu"], "jax_version": "...",
                     "functions": F,
                     "units": [{"fn": k or null, "inputs": [[op, out], ...], "outputs": [[op, out], ...],
                                "values": [op, ...]}, ...],          # one per graph node, in node order
                     "values": [{"op": i, "kind": "input" | "param" | "const", "shape": [...], "dtype": "..."}],
                     "outputs": [[op, out], ...]}                    # the step's array outputs
    fn/<k>.bin      function k: f(*inputs) -> outputs, as `jax.export.Exported.serialize()` wrote it
    const/<op>.npy  closed-over constants (numpy format, read with allow_pickle=False)

Values are named by the op graph's (node, output). Inputs and parameters are not stored: `values` makes seeded
random arrays of their shapes (floats standard normal, integers zero, as simulator.measure.profile does), which is all
timing needs. Loading reads JSON, numpy arrays and `jax.export.deserialize` only: a file never names code that
runs, and a damaged or mismatched file is a one-line InputError naming the file and the part.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from simulator.hardware.devices import local_devices
from simulator.hardware.plans import units_plan
from simulator.measure.calibrate import profile_plan
from simulator.measure.profile import random_operand
from simulator.model.errors import InputError
from simulator.model.graph import Graph, Source
from simulator.model.io import PathLike, atomic_write_bytes
from simulator.model.limits import MAX_INDEX
from simulator.tracing.lowering import UnitProgram, unit_programs

FORMAT, VERSION = "placeto-export", 1
VALUE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex64", "complex128", "key<fry>")
MAX_MEMBER_BYTES = 2**31  # a zip member larger than this (uncompressed) is refused, not read
MAX_VALUE_ELEMENTS = 2**33


def export_path(graph_path: PathLike) -> Path:
    """The exported program's path: G.json.gz -> G.export.zip."""
    p = Path(graph_path)
    name = p.name
    for suffix in (".gz", ".json"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return p.with_name(name + ".export.zip")


def fingerprint(graph: Graph) -> str:
    """sha256 of the node names and edges: ties an export to its graph.

    Costs are not in it: they may change.
    """
    h = hashlib.sha256()
    h.update("\n".join(graph.names).encode())
    h.update(np.stack([graph.edge_src, graph.edge_dst, graph.edge_out]).astype(np.int64).tobytes())
    return h.hexdigest()


class Bundle(NamedTuple):
    """An exported program, loaded: its units and values."""

    path: str
    units: tuple  # [U] simulator.tracing.lowering.UnitProgram, U = the graph's node count
    specs: dict  # op -> (kind, shape tuple, dtype name) of input/param/const values
    consts: dict  # op -> np.ndarray (or a PRNG key array)
    outputs: tuple  # the step's array outputs, as Sources
    platforms: tuple[str, ...]
    cache: dict  # jitted functions per (unit key, device), shared by every plan of this bundle


# ---- writing -------------------------------------------------------------------------------------------------
def _input_avals(traced: Any) -> dict[int, Any]:
    """op -> aval of every input, param and const node.

    Inputs and params are the jaxpr's invars, in node order.
    """
    import jax

    inputs = [i for i, e in enumerate(traced.equations) if e is None and traced.input_leaf[i] >= 0]
    avals = dict(zip(inputs, (v.aval for v in traced.closed_jaxpr.jaxpr.invars)))
    avals.update((i, jax.typeof(c)) for i, c in enumerate(traced.const_values) if c is not None)
    return avals


def _aval(traced: Any, avals: dict, source: Any) -> Any:
    eqn = traced.equations[source.node]
    return eqn.outvars[source.out].aval if eqn is not None else avals[source.node]


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    if name not in VALUE_DTYPES:
        raise InputError(f"cannot export a value of dtype {name!r} (supported: {', '.join(VALUE_DTYPES)})")
    return name


def _npy(value: Any) -> bytes:
    import jax

    if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
    buf = io.BytesIO()
    np.save(buf, np.asarray(value), allow_pickle=False)
    return buf.getvalue()


def export_program(traced: Any, graph: Graph, path: PathLike, op_to_group: np.ndarray | None = None,
                   platforms: Sequence[str] | None = None) -> dict:
    """Write the exported program of `graph` to `path`, atomically.

    `graph` is the op graph of `traced`, or its grouping via `op_to_group` int32[N_ops]. platforms: jax.export
    lowering platforms (default: the local one).

    Returns:
      the manifest.

    Raises:
      InputError: if the units do not match the graph's nodes, or a value's dtype cannot be exported.
    """
    import jax
    from jax import export as jax_export

    units = unit_programs(traced, op_to_group)
    if len(units) != graph.n_nodes:
        raise InputError(f"graph {graph.name!r} has {graph.n_nodes} nodes but the program {len(units)} units")
    avals = _input_avals(traced)
    platforms = tuple(platforms or (jax.devices()[0].platform,))
    blobs: list[bytes] = []
    fn_of_key: dict[Any, int] = {}
    unit_rows = []
    for unit in units:
        k = None
        if unit.body is not None:
            if unit.key not in fn_of_key:
                args = [_aval(traced, avals, s) for s in unit.inputs]
                exported = jax_export.export(jax.jit(unit.body), platforms=platforms)(*args)
                fn_of_key[unit.key] = len(blobs)
                blobs.append(bytes(exported.serialize()))
            k = fn_of_key[unit.key]
        unit_rows.append({"fn": k, "inputs": [[s.node, s.out] for s in unit.inputs],
                          "outputs": [[s.node, s.out] for s in unit.outputs], "values": list(unit.values)})
    values, files = [], {}
    for unit in units:
        for i in unit.values:
            kind = "const" if traced.const_values[i] is not None else traced.graph.ops[i]
            aval = avals[i]
            values.append({"op": i, "kind": kind, "shape": list(aval.shape), "dtype": _dtype_name(aval.dtype)})
            if kind == "const":
                files[f"const/{i}.npy"] = _npy(traced.const_values[i])
    manifest = {"format": FORMAT, "version": VERSION, "graph": graph.name, "fingerprint": fingerprint(graph),
                "n_ops": traced.graph.n_nodes, "platforms": list(platforms), "jax_version": jax.__version__,
                "functions": len(blobs), "units": unit_rows, "values": values,
                "outputs": [[a.node, a.out] for a in traced.program_outputs if isinstance(a, Source)]}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        z.writestr(_member("manifest.json"), json.dumps(manifest, separators=(",", ":")))
        for k, blob in enumerate(blobs):
            z.writestr(_member(f"fn/{k}.bin"), blob)
        for name, data in files.items():
            z.writestr(_member(name), data)
    atomic_write_bytes(path, buf.getvalue())
    return manifest


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # no timestamps: identical programs, same bytes
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


# ---- reading -------------------------------------------------------------------------------------------------
def _read(z: zipfile.ZipFile, name: str, where: str) -> bytes:
    try:
        info = z.getinfo(name)
    except KeyError:
        raise InputError(f"missing {name}", where) from None
    if info.file_size > MAX_MEMBER_BYTES:
        raise InputError(f"{name}: {info.file_size} bytes, more than {MAX_MEMBER_BYTES}", where)
    try:
        return z.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise InputError(f"{name}: cannot read: {e}", where) from None


def _pairs(x: Any, field: str, n_ops: int) -> tuple:
    if not isinstance(x, list):
        raise InputError(f"{field}: expected a list of [op, output] pairs")
    out = []
    for k, pair in enumerate(x):
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
                and 0 <= pair[0] < n_ops and 0 <= pair[1] <= MAX_INDEX):
            raise InputError(f"{field}[{k}]: expected [op < {n_ops}, output >= 0], got {str(pair)[:40]}")
        out.append(Source(pair[0], pair[1]))
    return tuple(out)


def _ops(x: Any, field: str, n_ops: int) -> tuple[int, ...]:
    if not isinstance(x, list) or not all(type(v) is int and 0 <= v < n_ops for v in x):
        raise InputError(f"{field}: expected a list of op indices below {n_ops}")
    return tuple(x)


def _manifest(raw: bytes, graph: Graph) -> dict:
    try:
        m = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise InputError(f"manifest.json: not valid JSON: {str(e)[:80]}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise InputError(f"manifest.json: field 'format': expected {FORMAT!r}")
    if m.get("version") != VERSION:
        raise InputError(f"manifest.json: field 'version': unsupported {str(m.get('version'))[:20]} (this reads "
                         f"{VERSION})")
    if m.get("fingerprint") != fingerprint(graph):
        raise InputError(f"manifest.json: field 'fingerprint': this program was exported with another graph "
                         f"than {graph.name!r} (re-run `placeto import-jax --export`)")
    for key, types in (("n_ops", int), ("functions", int), ("units", list), ("values", list), ("outputs", list),
                       ("platforms", list)):
        if not isinstance(m.get(key), types) or isinstance(m.get(key), bool):
            raise InputError(f"manifest.json: field {key!r}: expected {types.__name__}")
    if not 0 < m["n_ops"] <= MAX_INDEX or not 0 <= m["functions"] <= MAX_INDEX:
        raise InputError("manifest.json: field 'n_ops' or 'functions' out of range")
    if len(m["units"]) != graph.n_nodes:
        raise InputError(f"manifest.json: field 'units': {len(m['units'])} units, the graph has {graph.n_nodes} "
                         f"nodes")
    return m


def _value_specs(m: dict) -> dict[int, tuple]:
    specs = {}
    for k, v in enumerate(m["values"]):
        where = f"manifest.json: values[{k}]"
        if not isinstance(v, dict):
            raise InputError(f"{where}: expected an object")
        op, kind, shape, dtype = v.get("op"), v.get("kind"), v.get("shape"), v.get("dtype")
        if type(op) is not int or not 0 <= op < m["n_ops"]:
            raise InputError(f"{where}: field 'op': expected an op index below {m['n_ops']}")
        if kind not in ("input", "param", "const"):
            raise InputError(f"{where}: field 'kind': expected 'input', 'param' or 'const'")
        if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= MAX_INDEX for d in shape) \
                or int(np.prod(shape, dtype=np.float64)) > MAX_VALUE_ELEMENTS:
            raise InputError(f"{where}: field 'shape': expected a list of at most {MAX_VALUE_ELEMENTS} elements")
        if dtype not in VALUE_DTYPES:
            raise InputError(f"{where}: field 'dtype': unknown {str(dtype)[:30]!r}")
        specs[op] = (kind, tuple(shape), dtype)
    return specs


def load_export(path: PathLike, graph: Graph) -> Bundle:
    """Read the exported program at `path`, checked against `graph`.

    Raises:
      InputError: naming `path`, if it is missing, damaged, or exported with another graph.
    """
    from jax import export as jax_export

    where = str(path)
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise InputError("no such file", where) from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise InputError(f"not an exported program (zip): {e}", where) from None
    with z:
        try:
            m = _manifest(_read(z, "manifest.json", where), graph)
            specs = _value_specs(m)
            functions = []
            for k in range(m["functions"]):
                blob = _read(z, f"fn/{k}.bin", where)
                try:
                    functions.append(jax_export.deserialize(bytearray(blob)))
                except Exception as e:  # noqa: BLE001 -- flatbuffers/MLIR raise many kinds; all mean "damaged"
                    raise InputError(f"fn/{k}.bin: not a jax.export artefact ({type(e).__name__}: "
                                     f"{str(e)[:80]})") from None
            units = tuple(_unit(u, k, m["n_ops"], functions) for k, u in enumerate(m["units"]))
            consts = {op: _const(_read(z, f"const/{op}.npy", where), op, spec)
                      for op, spec in specs.items() if spec[0] == "const"}
            outputs = _pairs(m["outputs"], "manifest.json: outputs", m["n_ops"])
        except InputError as e:
            raise e.with_source(where)
    missing = next((i for u in units for i in u.values if i not in specs), None)
    if missing is not None:
        raise InputError(f"manifest.json: op {missing} is held by a unit but has no entry in 'values'", where)
    return Bundle(where, units, specs, consts, outputs, tuple(map(str, m["platforms"])), {})


def _unit(u: Any, k: int, n_ops: int, functions: list) -> Any:
    where = f"manifest.json: units[{k}]"
    if not isinstance(u, dict):
        raise InputError(f"{where}: expected an object")
    fn = u.get("fn")
    if fn is not None and (type(fn) is not int or not 0 <= fn < len(functions)):
        raise InputError(f"{where}: field 'fn': expected null or a function index below {len(functions)}")
    inputs = _pairs(u.get("inputs"), f"{where}.inputs", n_ops)
    outputs = _pairs(u.get("outputs"), f"{where}.outputs", n_ops)
    values = _ops(u.get("values"), f"{where}.values", n_ops)
    body = None
    if fn is not None:
        exported = functions[fn]
        if len(exported.in_avals) != len(inputs) or len(exported.out_avals) != len(outputs):
            raise InputError(f"{where}: function {fn} takes {len(exported.in_avals)} inputs and gives "
                             f"{len(exported.out_avals)} outputs, the unit {len(inputs)} and {len(outputs)}")
        body = _caller(exported)
    return UnitProgram(values, inputs, outputs, body, ("fn", fn))


def _caller(exported: Any) -> Any:
    def body(*xs):
        return tuple(exported.call(*xs))

    return body


def _const(raw: bytes, op: int, spec: tuple) -> Any:
    import jax

    try:
        value = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"const/{op}.npy: not a numpy array file: {str(e)[:80]}") from None
    kind, shape, dtype = spec
    if dtype == "key<fry>":
        if value.shape != shape + (2,) or value.dtype != np.uint32:
            raise InputError(f"const/{op}.npy: expected uint32{list(shape) + [2]} key data")
        return jax.random.wrap_key_data(value, impl="threefry2x32")
    if value.shape != shape or str(value.dtype) != dtype:
        raise InputError(f"const/{op}.npy: {value.dtype}{list(value.shape)}, the manifest says {dtype}{list(shape)}")
    return value


def values(bundle: Bundle, seed: int = 0) -> list:
    """[N_ops] the value every input/param/const op holds, None elsewhere.

    Constants as stored, inputs and parameters seeded random arrays of their shapes (floats standard normal,
    integers zero).
    """
    import jax

    n_ops = max([max(u.values, default=-1) for u in bundle.units] + [-1]) + 1
    out: list = [None] * n_ops
    rng = np.random.default_rng(seed)
    for op in sorted(bundle.specs):
        kind, shape, dtype = bundle.specs[op]
        if kind == "const":
            out[op] = bundle.consts[op]
        else:
            dt = jax.random.key(0).dtype if dtype == "key<fry>" else jax.numpy.dtype(dtype)
            out[op] = random_operand(jax.ShapeDtypeStruct(shape, dt), rng)
    return out


def bundle_plan(bundle: Bundle, vals: Sequence[Any], placement: Sequence[int], devices: Sequence,
                order: Sequence[int] | None = None):
    """The dispatch Plan of the exported program, placed unit by unit.

    A simulator.hardware.dispatch.Plan; placement: int[U] device of each unit.
    """
    return units_plan(bundle.units, vals, placement, devices, bundle.outputs, None, bundle.cache, order)


def describe(manifest: dict, path: PathLike) -> str:
    """One line for the import report."""
    size = Path(path).stat().st_size
    return (f"{path}: the program as {len(manifest['units'])} units, {manifest['functions']} exported functions "
            f"(jax.export, {', '.join(manifest['platforms'])}), {size / 1e6:.1f} MB: `eval --hardware` and "
            f"`profile` run it from the files alone")


def find_export(graph: Graph, path: PathLike | None = None) -> Bundle | None:
    """The exported program of `graph`, or None if it has none.

    The file `path` (the user's --exported; InputError if it cannot be used), else `export_path` of the file the
    graph was loaded from, when there is one. The graph file's contents never name the file. Loaded once per graph
    object (graph.cache).
    """
    if path is None:
        if not graph.source or not export_path(graph.source).is_file():
            return None
        path = export_path(graph.source)
    key = ("export", str(path))
    if key not in graph.cache:
        graph.cache[key] = load_export(path, graph)
    return graph.cache[key]


def measure_units(bundle: Bundle, repeats: int = 5, seed: int = 0) -> np.ndarray:
    """float64[U] us of every unit run alone on the first local device.

    The exported program's units, net of the dispatch floor (simulator.measure.calibrate.profile_plan).
    """
    plan = bundle_plan(bundle, values(bundle, seed), np.zeros(len(bundle.units), np.int32), local_devices(1))
    return profile_plan(plan, repeats)
