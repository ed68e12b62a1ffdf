"""simulator.tracing.trace: a JAX training step -> op graph."""

import re
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulator.model.costs import CONTROL_FLOW_OPS
from simulator.model.errors import InputError
from simulator.model.io import dumps_graph, load_graph, save_graph
from simulator.tracing.importer import trace_import
from simulator.model.graph import Source
from simulator.tracing.trace import INLINED, equation_at, trace


def mlp_step_and_args(optimizer=None, batch=8, d_in=10, hidden=16, d_out=4):
    """A 2-layer MLP training step (forward, grad, optax update) and example arguments."""
    tx = optimizer or optax.sgd(0.1, momentum=0.9)
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {"fc1": {"w": jax.random.normal(k1, (d_in, hidden)), "b": jnp.zeros(hidden)},
              "fc2": {"w": jax.random.normal(k2, (hidden, d_out)), "b": jnp.zeros(d_out)}}

    def loss(p, x, y):
        h = jax.nn.relu(x @ p["fc1"]["w"] + p["fc1"]["b"])
        return jnp.mean((h @ p["fc2"]["w"] + p["fc2"]["b"] - y) ** 2)

    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, (params, tx.init(params), jnp.ones((batch, d_in)), jnp.zeros((batch, d_out)))


def lstm_step_and_args(steps=3, batch=2, hidden=8):
    """A small LSTM-like cell unrolled in Python, with its SGD step."""
    params = {"wx": jnp.ones((hidden, 4 * hidden)) * 0.1, "wh": jnp.ones((hidden, 4 * hidden)) * 0.1}

    def loss(p, xs):
        h = c = jnp.zeros((batch, hidden))
        for t in range(steps):
            i, f, g, o = jnp.split(xs[t] @ p["wx"] + h @ p["wh"], 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return jnp.sum(h)

    def step(params, xs):
        grads = jax.grad(loss)(params, xs)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss(params, xs)

    return step, (params, jnp.ones((steps, batch, hidden)))


def count_equations(jaxpr) -> int:
    """Equations after inlining calls, counted independently of the tracer's walk."""
    total = 0
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        name = eqn.primitive.name
        body = next((eqn.params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in eqn.params), None)
        total += count_equations(body) if name in INLINED and body is not None else 1
    return total


@pytest.fixture(scope="module")
def mlp():
    step, args = mlp_step_and_args()
    return trace(step, *args, name="mlp"), args


def test_node_count_is_inputs_plus_recursive_equations(mlp):
    traced, args = mlp
    g = traced.graph
    n_leaves = len(jax.tree.leaves(args))
    assert g.meta["n_equations"] == count_equations(traced.closed_jaxpr)
    n_eqn_nodes = sum(op not in ("input", "param", "const") for op in g.ops)
    assert n_eqn_nodes == g.meta["n_equations"] - g.meta["n_dead_equations"]
    assert sum(op in ("input", "param") for op in g.ops) == n_leaves
    assert not any(op in INLINED for op in g.ops)


def test_edges_match_operand_shapes(mlp):
    traced, _ = mlp
    g = traced.graph
    for j, node_args in enumerate(traced.args):
        in_shapes = g.attrs[j].get("in_shapes", [])
        for k, a in enumerate(node_args):
            if isinstance(a, Source):
                assert 0 <= a.out < g.n_outputs[a.node]
                assert g.attrs[a.node]["out_shapes"][a.out] == in_shapes[k]
    edges = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_out.tolist()))
    expected = {(a.node, j, a.out) for j, node_args in enumerate(traced.args) for a in node_args
                if isinstance(a, Source)}
    assert edges == expected
    assert len(g.topo_order) == g.n_nodes  # acyclic
    for i, eqn in enumerate(traced.equations):
        if eqn is not None:
            assert equation_at(traced.closed_jaxpr, traced.eqn_paths[i]) is eqn
            assert g.ops[i] == eqn.primitive.name


def test_params_are_persistent_and_colocated_with_updates(mlp):
    traced, args = mlp
    g = traced.graph
    leaves = jax.tree.leaves(args)
    for i, op in enumerate(g.ops):
        if op in ("param", "input"):
            leaf = leaves[traced.input_leaf[i]]
            assert g.out_bytes[g.out_offsets[i]] == leaf.size * leaf.dtype.itemsize
            assert g.persistent_bytes[i] == (leaf.nbytes if op == "param" else 0)
    # output k of the step mirrors param leaf k (same flattening of (params, opt_state) first)
    params = [i for i, op in enumerate(g.ops) if op == "param"]
    assert len(params) == 8  # 4 weights + 4 momentum traces
    for k, i in enumerate(params):
        out = traced.outputs[k]
        assert isinstance(out, Source) and g.colocation[out.node] == g.colocation[i] is not None
    w1 = g.index["00000:param[0]['fc1']['b']"]
    trace_node = next(i for i in params if "[1]" in g.names[i] and g.names[i].endswith("['fc1']['b']"))
    assert g.colocation[trace_node] == g.colocation[w1] == "[0]['fc1']['b']"  # momentum sits with its variable
    assert all(g.colocation[i] is None for i, op in enumerate(g.ops) if op == "dot_general" and
               "transpose" not in g.attrs[i]["name_stack"] and g.attrs[i]["out_shapes"][0][0] == 8)


def test_names_attrs_and_meta(mlp):
    traced, _ = mlp
    g = traced.graph
    for i, (name, op) in enumerate(zip(g.names, g.ops)):
        assert name.startswith(f"{i:05d}:")
        if traced.equations[i] is not None:
            stack = g.attrs[i]["name_stack"]
            assert name == f"{i:05d}:{stack}/{op}" if stack else name == f"{i:05d}:{op}"
            assert {"in_shapes", "in_dtypes", "out_shapes", "out_dtypes", "flops"} <= set(g.attrs[i])
    assert any("transpose(jvp(" in g.attrs[i].get("name_stack", "") for i in range(g.n_nodes))
    assert g.meta["source"]["function"].endswith("mlp_step_and_args.<locals>.step")
    assert g.meta["jax_version"] == jax.__version__
    assert not g.costs  # costs come from simulator.model.costs / simulator.measure.profile


def test_round_trip_and_determinism(tmp_path, mlp):
    traced, _ = mlp
    path = tmp_path / "mlp.json.gz"
    save_graph(traced.graph, path)
    save_graph(load_graph(path), tmp_path / "again.json.gz")
    assert path.read_bytes() == (tmp_path / "again.json.gz").read_bytes()
    step, args = mlp_step_and_args()
    assert dumps_graph(trace(step, *args, name="mlp").graph) == dumps_graph(traced.graph)


def test_lstm_unrolled_graph():
    step, args = lstm_step_and_args(steps=3)
    traced = trace(step, *args, persistent_argnums=(0,))
    g = traced.graph
    assert g.ops.count("tanh") >= 6 and g.ops.count("logistic") >= 9  # forward, per step, unrolled
    assert [g.ops[i] for i in range(3)] == ["param", "param", "input"]
    assert g.meta["n_equations"] == count_equations(traced.closed_jaxpr)


def test_inlining_control_flow_constants_and_dead_code():
    table = np.arange(6.0, dtype=np.float32)

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))

    def fn(x):
        unused = jnp.exp(x)  # noqa: F841  (dead code: dropped)
        y = jax.jit(lambda z: z * 2.0)(f(x)) + table
        y = jax.checkpoint(lambda z: jnp.tanh(z))(y)
        y = jax.nn.relu(y)  # custom_jvp
        carry, ys = jax.lax.scan(lambda c, a: (c + a, c * a), 0.0, y)
        return jax.lax.cond(carry > 0, lambda a: a + 1, lambda a: a - 1, ys)

    traced = trace(fn, jnp.ones(6, jnp.float32))
    g = traced.graph
    assert "exp" not in g.ops and g.meta["n_dead_equations"] == 1
    assert not set(g.ops) & set(INLINED)
    assert {"sin", "tanh", "max", "scan", "cond"} <= set(g.ops)
    const = g.ops.index("const")
    assert g.persistent_bytes[const] == 24 and np.array_equal(traced.const_values[const], table)
    scan = g.ops.index("scan")
    body = traced.equations[scan].params["jaxpr"].jaxpr.eqns  # scalar add, mul (and converts): 1 FLOP each
    assert g.attrs[scan]["flops"] == 6 * len(body) and g.attrs[scan]["kernels"] == 6 * len(body)
    assert {"scan", "while", "cond"} == CONTROL_FLOW_OPS
    # the "* 2.0" literal is folded: two operands in the attrs, one edge
    mul = next(i for i, a in enumerate(traced.args) if g.ops[i] == "mul" and not isinstance(a[1], Source))
    assert len(g.attrs[mul]["in_shapes"]) == 2 and int(np.sum(g.edge_dst == mul)) == 1


def test_trace_import_json_and_factory(tmp_path, monkeypatch):
    module = tmp_path / "toy_model.py"
    module.write_text(textwrap.dedent("""
        import jax.numpy as jnp
        def step(params, x):
            return {"w": params["w"] - 0.1 * x.T @ (x @ params["w"])}, jnp.sum(x)
        def example_args():
            return ({"w": jnp.zeros((3, 2))}, jnp.ones((4, 3)))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = '[{"w": {"shape": [3, 2]}}, {"shape": [4, 3], "dtype": "float32"}]'
    a = trace_import("toy_model:step", spec, persistent_argnums=(0,))
    b = trace_import("toy_model:step", "toy_model:example_args", persistent_argnums=(0,))
    assert dumps_graph(a.graph) == dumps_graph(b.graph)
    assert a.graph.meta["source"]["function"] == "toy_model:step"
    w = a.graph.index["00000:param[0]['w']"]
    assert a.graph.colocation[a.outputs[0].node] == a.graph.colocation[w]
    for bad in ("toy_model", "toy_model:nope", "no_such_module_xyz:f"):
        with pytest.raises(InputError):
            trace_import(bad, spec)
    for bad_spec in ("[{\"shape\": [2, -1]}]", "[{\"shape\": [2], \"dtype\": \"nope\"}]", "{\"a\": 1}", "[1]"):
        with pytest.raises(InputError):
            trace_import("toy_model:step", bad_spec)
    for wrong in ('[{"w": {"shape": [3, 2]}}]', spec[:-1] + ', {"shape": [1]}]'):  # one too few, one too many
        with pytest.raises(InputError, match=r"toy_model:step\(params, x\) takes 2 positional arguments, but "
                                             r"--args-spec gives [13] example argument"):
            trace_import("toy_model:step", wrong)


def test_check_arity_counts_defaults_varargs_and_keywords():
    from simulator.tracing.importer import check_arity

    def f(a, b=1, *rest):
        return a

    def g(a, *, key):
        return a

    check_arity(f, "m:f", 1)
    check_arity(f, "m:f", 5)
    check_arity(len, "builtins:len", 1)
    with pytest.raises(InputError, match=r"m:f\(a, b\) takes at least 1 positional argument, but --args-spec "
                                         r"gives 0 example arguments"):
        check_arity(f, "m:f", 0)
    with pytest.raises(InputError, match="needs the keyword argument\\(s\\) key"):
        check_arity(g, "m:g", 1)


def test_node_names_are_readable(mlp):
    traced, _ = mlp
    pattern = re.compile(r"^\d{5}:(param|input)\[\d+\]|^\d{5}:const|^\d{5}:([^/]*/)*[a-z_0-9]+$")
    assert all(pattern.match(n) for n in traced.graph.names)


def test_optimizer_slots_join_their_variable_with_per_layer_state():
    """opt_state = {layer: adam state}: `[1]['l1'][0].mu['w']` shadows `[0]['l1']['w']` (a subsequence)."""
    tx = optax.adam(1e-3)
    params = {"l1": {"w": jnp.ones((4, 4)), "b": jnp.zeros(4)}, "l2": {"w": jnp.ones((4, 4))}}

    def step(p, s, x):
        grads = jax.grad(lambda q: jnp.sum((x @ q["l1"]["w"] + q["l1"]["b"]) @ q["l2"]["w"]))(p)
        new_p, new_s = {}, {}
        for layer in p:
            u, new_s[layer] = tx.update(grads[layer], s[layer], p[layer])
            new_p[layer] = optax.apply_updates(p[layer], u)
        return new_p, new_s

    g = trace(step, params, {k: tx.init(v) for k, v in params.items()}, jnp.ones((2, 4))).graph
    by_name = {n.split(":", 1)[1]: c for n, c in zip(g.names, g.colocation) if n.split(":", 1)[1].startswith("param")}
    assert by_name["param[1]['l1'][0].mu['w']"] == by_name["param[1]['l1'][0].nu['w']"] == "[0]['l1']['w']"
    assert by_name["param[1]['l2'][0].mu['w']"] == "[0]['l2']['w']"  # not l1's w: the path decides
    assert by_name["param[1]['l1'][0].count"] == "[1]['l1'][0].count"
