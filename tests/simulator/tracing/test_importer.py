"""Importing training steps written with outside libraries: flax TrainState (examples/), flax linen with
{params, batch_stats}, flax nnx (in-place updates), equinox (static leaves, loss returned first), keras 3's
stateless variable lists; named paths; the exported program run from the files alone.

Every model is small (traced in well under a second after its library's import); the assertions are on what the
tracer must find: which leaves are parameters, that each optimizer slot sits in its parameter's colocation group,
and that the equation computing each new value sits there too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulator.model.errors import InputError
from simulator.model.graph import Source
from simulator.tracing.trace import trace

# its module fixtures are costly: `make test` (--dist loadgroup) runs the whole module on one worker, so they run once
pytestmark = pytest.mark.xdist_group("test_import_models")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def colocated_updates(traced) -> dict[str, int]:
    """{parameter group: equation nodes in it}: a parameter's update chain joins its group."""
    g = traced.graph
    params = {c for c, op, i in zip(g.colocation, g.ops, range(g.n_nodes))
              if op == "param" and traced.roles.kind[traced.input_leaf[i]] == "param"}
    counts = dict.fromkeys(params, 0)
    for i, c in enumerate(g.colocation):
        if c in counts and traced.equations[i] is not None:
            counts[c] += 1
    return counts


def check_slots(traced, slots_per_param: int) -> None:
    """Every slot's group is a parameter's, each parameter has `slots_per_param` of them and an update chain."""
    g, roles = traced.graph, traced.roles
    by_leaf = {int(traced.input_leaf[i]): i for i in range(g.n_nodes) if traced.input_leaf[i] >= 0}
    param_groups = [roles.group[k] for k in range(len(roles.kind)) if roles.kind[k] == "param"]
    assert param_groups and len(set(param_groups)) == len(param_groups)
    slot_groups = [roles.group[k] for k in range(len(roles.kind)) if roles.kind[k] == "slot"]
    assert sorted(slot_groups) == sorted(param_groups * slots_per_param)
    for k, kind in enumerate(roles.kind):
        if kind in ("param", "slot"):
            assert g.colocation[by_leaf[k]] == roles.group[k]
    assert all(n > 0 for n in colocated_updates(traced).values()), colocated_updates(traced)


# ---- flax TrainState: the README example, through the command line ------------------------------------------
@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """`placeto import-jax` run in examples/ as a user would (the folder not on sys.path), with --export."""
    from placeto.cli.main import main

    out = tmp_path_factory.mktemp("example")
    argv = ["import-jax", "flax_trainstate:train_step", "--args-spec", "flax_trainstate:example_args",
            "--out", str(out / "mlp.json.gz"), "--grouped-out", str(out / "mlp.grouped.json.gz"), "--groups", "8",
            "--max-cp-growth", "1000", "--export"]
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", str(EXAMPLES), saved_cwd)]
    sys.modules.pop("flax_trainstate", None)
    os.chdir(EXAMPLES)
    try:
        import io
        from contextlib import redirect_stdout

        buf = io.StringIO()
        with redirect_stdout(buf):
            code = main(argv)
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
    return out, code, buf.getvalue()


def test_trainstate_example_imports_from_its_folder(example):
    from simulator.model.io import load_graph

    out, code, printed = example
    assert code == 0, printed
    assert "TrainState at [0] (.params, .opt_state): 6 parameters, 12 optimizer slots" in printed
    g = load_graph(out / "mlp.json.gz")
    assert g.meta["state"]["params"] == "[0].params" and g.meta["state"]["n_slot"] == 12
    for i, name in enumerate(g.names):  # Adam's mu and nu sit with their variable
        m = re.search(r"param\[0\]\.opt_state\[0\]\.(mu|nu)(\[.*)$", name)
        if m:
            assert g.colocation[i] == "[0].params" + m.group(2)
    grouped = load_graph(out / "mlp.grouped.json.gz")
    report = grouped.meta["grouping"]
    assert grouped.n_nodes == 8 and report["stopped"] is None and report["cp_growth"] <= 10


def test_docs_show_the_example_file():
    """docs/importing.md's example is examples/flax_trainstate.py, verbatim."""
    readme = (ROOT / "docs" / "importing.md").read_text()
    section = readme.split("# Importing your model", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = (EXAMPLES / "flax_trainstate.py").read_text()
    assert block.strip() in code and "def train_step(state: TrainState, batch):" in block


def _exported_example(example):
    """(Traced step, grouped graph, its exported bundle, op values, the step's array outputs by jax.jit)."""
    from simulator.tracing import export, lowering
    from simulator.model.io import load_graph

    out, _, _ = example
    sys.path.insert(0, str(EXAMPLES))
    try:
        import flax_trainstate as ex
    finally:
        sys.path.remove(str(EXAMPLES))
    args = ex.example_args()
    traced = trace(ex.train_step, *args)
    grouped = load_graph(out / "mlp.grouped.json.gz")
    bundle = export.load_export(export.export_path(out / "mlp.grouped.json.gz"), grouped)
    reference = jax.tree.leaves(jax.jit(ex.train_step)(*args))  # TrainState.step, a Python int, is static here
    assert len(traced.outputs) == len(reference)
    want = [x for x, a in zip(reference, traced.outputs) if isinstance(a, Source)]
    return traced, grouped, bundle, lowering.leaf_values(traced, args), want


def test_exported_program_computes_the_step(example):
    """The exported units, run on the example's real arguments, give what jax.jit of the step gives."""
    from simulator.tracing import export
    from simulator.hardware import dispatch as hardware

    traced, grouped, bundle, values, want = _exported_example(example)
    plan = export.bundle_plan(bundle, values, np.arange(grouped.n_nodes) % 2, jax.devices()[:1] * 2)
    flat, _ = hardware.run_plan(plan, threads=False)
    assert len(flat) == len(want) == 20
    for a, b in zip(flat, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_staged_exported_units_compute_the_step(example):
    """plans.units_plan(stages=True) on the exported units computes the step, step after step, also when two
    device indices name one physical device (a device_put there returns the very array, so received copies must
    not be donated)."""
    from simulator.hardware import dispatch as hardware, plans

    _, grouped, bundle, values, want = _exported_example(example)
    for placement in (np.zeros(grouped.n_nodes, int), np.arange(grouped.n_nodes) % 2):
        plan = plans.units_plan(bundle.units, values, placement, jax.devices()[:1] * 2, bundle.outputs, None,
                                bundle.cache, None, stages=True)
        assert sum(t.fn is not None for t in plan.tasks) <= grouped.n_nodes
        for _ in range(2):  # the second step reads the resident values again
            flat, _ = hardware.run_plan(plan)
        assert len(flat) == len(want)
        for a, b in zip(flat, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_eval_and_profile_run_from_the_files_alone(example, tmp_path):
    """In a folder holding only the grouped graph, its .export.zip, placements and a cluster: no module."""
    from simulator import load_graph, save_placement
    from simulator.model.cluster import Cluster, Device, save_cluster

    out, code, _ = example
    for name in ("mlp.grouped.json.gz", "mlp.grouped.export.zip"):
        shutil.copy(out / name, tmp_path / name)
    n = load_graph(tmp_path / "mlp.grouped.json.gz").n_nodes
    save_placement(tmp_path / "one.json", np.zeros(n, int), ["/cpu:0", "/cpu:1"])
    save_placement(tmp_path / "rr.json", np.arange(n) % 2, ["/cpu:0", "/cpu:1"])
    save_cluster(Cluster("c", tuple(Device(f"/cpu:{i}", "local-cpu", 1e12) for i in range(2)), 5.0, 10.0, 1e4),
                 tmp_path / "c.json")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "PLACETO_CACHE": str(tmp_path / "cache"),
           "PLACETO_MAX_LOAD_PER_CORE": "1000"}  # a busy test machine's profile is cached as final all the same
    run = lambda *argv: subprocess.run([sys.executable, "-m", "placeto.cli.main", *argv], cwd=tmp_path, env=env,  # noqa
                                       capture_output=True, text=True, timeout=240)
    ev = run("eval", "mlp.grouped.json.gz", "--placement", "one.json", "rr.json", "--hardware", "--cluster",
             "c.json", "--repeats", "1", "--warmup", "1")
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "profiling mlp" in ev.stdout and "inside the compiled step" in ev.stdout  # no profile yet: measured
    again = run("eval", "mlp.grouped.json.gz", "--placement", "one.json", "--hardware", "--cluster", "c.json",
                "--repeats", "1", "--warmup", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "profile: cached (local-cpu in " in again.stdout and "profiling" not in again.stdout  # place's cache
    assert "exported-program execution" in ev.stdout and "rr.json" in ev.stdout
    assert "exported program mlp.grouped.export.zip (its units in one jax.jit)" in ev.stdout  # plain jit's
    prof = run("profile", "mlp.grouped.json.gz", "--out", "p.json.gz", "--repeats", "2")
    assert prof.returncode == 0, prof.stderr[-2000:]
    assert "method step, exported mlp.grouped.export.zip" in prof.stdout
    how = load_graph(tmp_path / "p.json.gz").meta["profile"]["local-cpu"]
    assert how["method"] == "step" and how["source"] == "exported mlp.grouped.export.zip" and how["busy_us"] > 0


def test_damaged_exported_programs_are_one_line_errors(example, tmp_path):
    import zipfile

    from simulator.tracing import export
    from simulator.model.io import load_graph

    out, _, _ = example
    graph = load_graph(out / "mlp.grouped.json.gz")
    good = export.export_path(out / "mlp.grouped.json.gz")
    with zipfile.ZipFile(good) as z:
        members = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(members["manifest.json"])
    cases = {"truncated": good.read_bytes()[:200], "garbage_fn": {"fn/0.bin": b"\x00garbage" * 20},
             "other_graph": {"manifest.json": json.dumps({**manifest, "fingerprint": "0" * 64}).encode()},
             "bad_pair": {"manifest.json": json.dumps({**manifest, "outputs": [[10**9, 0]]}).encode()},
             "no_fn": {"fn/0.bin": None}}
    for name, change in cases.items():
        path = tmp_path / f"{name}.zip"
        if isinstance(change, bytes):
            path.write_bytes(change)
        else:
            with zipfile.ZipFile(path, "w") as z:
                for member, data in {**members, **change}.items():
                    if data is not None:
                        z.writestr(member, data)
        with pytest.raises(InputError) as e:
            export.load_export(path, graph)
        assert str(e.value).startswith(str(path)) and "\n" not in str(e.value), (name, str(e.value))


# ---- flax linen with {params, batch_stats} ----------------------------------------------------------------------
def test_linen_batch_stats_are_state_not_parameters():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x, train=True):
            x = nn.Conv(8, (3, 3))(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train)(x)).mean((1, 2))
            return nn.Dense(10)(x)

    model, tx = CNN(), optax.adam(1e-3)
    variables = model.init(jax.random.key(0), jnp.ones((2, 8, 8, 3)))

    def step(variables, opt_state, batch):
        def loss(p):
            out, upd = model.apply({"params": p, "batch_stats": variables["batch_stats"]}, batch["x"],
                                   mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(out, batch["y"]).mean(), upd

        (value, upd), grads = jax.value_and_grad(loss, has_aux=True)(variables["params"])
        updates, opt_state = tx.update(grads, opt_state, variables["params"])
        return {"params": optax.apply_updates(variables["params"], updates), **upd}, opt_state, value

    batch = {"x": jnp.ones((2, 8, 8, 3)), "y": jnp.zeros(2, jnp.int32)}
    traced = trace(step, variables, tx.init(variables["params"]), batch)
    roles = traced.roles
    assert (roles.params_path, roles.opt_path) == ("[0]['params']", "[1]")
    assert roles.count("param") == 6 and roles.count("state") == 3  # BN mean/var and Adam's count
    check_slots(traced, 2)


# ---- flax nnx: modules and optimizer updated in place ----------------------------------------------------------
def test_nnx_model_and_optimizer_updated_in_place():
    from flax import nnx

    class CNN(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.conv = nnx.Conv(1, 8, kernel_size=(3, 3), rngs=rngs)
            self.bn = nnx.BatchNorm(8, rngs=rngs)
            self.linear = nnx.Linear(8, 10, rngs=rngs)

        def __call__(self, x):  # x: float32[batch, 8, 8, 1]
            return self.linear(nnx.relu(self.bn(self.conv(x))).mean((1, 2)))

    model = CNN(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    traced = trace(train_step, model, optimizer, {"x": jnp.ones((4, 8, 8, 1)), "y": jnp.zeros(4, jnp.int32)})
    assert traced.roles.how == "flax nnx variables" and traced.roles.count("param") == 6
    assert len(traced.updates) == 6 + 12 + 2 + 2  # params, mu/nu, BN mean/var, optimizer step and count
    assert "sqrt" in traced.graph.ops  # Adam's update is live although the step only returns the loss
    check_slots(traced, 2)


# ---- equinox: static leaves, the new model returned second -----------------------------------------------------
def test_equinox_module_with_static_leaves():
    import equinox as eqx

    model = eqx.nn.MLP(5, 3, 16, 2, key=jax.random.key(0))
    tx = optax.adam(1e-3)

    @eqx.filter_jit
    def make_step(model, opt_state, x, y):
        loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean((jax.vmap(m)(x) - y) ** 2))(model)
        updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return loss, eqx.apply_updates(model, updates), opt_state

    traced = trace(make_step, model, tx.init(eqx.filter(model, eqx.is_array)), jnp.ones((8, 5)), jnp.ones((8, 3)))
    roles = traced.roles
    assert roles.params_path == "[0].layers" and roles.count("static") == 2  # the two activation functions
    check_slots(traced, 2)
    new_model = [a for a in traced.outputs[1:1 + roles.count("param")]]  # (loss, model, opt_state)
    assert all(isinstance(a, Source) and traced.graph.colocation[a.node] is not None for a in new_model)


# ---- keras 3: stateless variable lists (momentum and velocity interleaved) -------------------------------------
def test_keras_stateless_variable_lists():
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")  # a test extra (pyproject [test]); skipped only outside `make test`
    if keras.backend.backend() != "jax":
        pytest.skip("keras was imported with another backend")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(4)])
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.MeanSquaredError()

    def compute_loss(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, y_pred), non_trainable

    def train_step(state, data):
        trainable, non_trainable, optimizer_vars = state
        (loss, non_trainable), grads = jax.value_and_grad(compute_loss, has_aux=True)(trainable, non_trainable,
                                                                                      *data)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_vars)

    state = tuple([v.value for v in vs] for vs in (model.trainable_variables, model.non_trainable_variables,
                                                   optimizer.variables))
    traced = trace(train_step, state, (jnp.ones((4, 8)), jnp.zeros((4, 4))))
    roles = traced.roles
    assert (roles.params_path, roles.opt_path) == ("[0][0]", "[0][2]")
    assert roles.count("param") == 6 and roles.count("state") == 4  # BN moving stats, iteration, learning rate
    check_slots(traced, 2)
    by_leaf = {int(traced.input_leaf[i]): i for i in range(traced.graph.n_nodes) if traced.input_leaf[i] >= 0}
    names = [v.path for v in optimizer.variables]  # the slot of kernel k is named after it: check the pairing
    params = [v.path.replace("/", "_") for v in model.trainable_variables]
    for j, name in enumerate(names[2:], start=2):
        leaf = 6 + 2 + j  # flat order: 6 trainable, 2 non-trainable, then the optimizer's list
        param = next(p for p in params if name.endswith(p + "_momentum") or name.endswith(p + "_velocity"))
        assert traced.graph.colocation[by_leaf[leaf]] == f"[0][0][{params.index(param)}]"


# ---- named paths ------------------------------------------------------------------------------------------
def test_named_params_and_opt_state():
    """A hand-written momentum in a dict: nothing in the structure says which is which, so the user names them."""
    params = {"w1": jnp.ones((4, 8)), "w2": jnp.ones((8, 2))}

    def step(state, x):
        grads = jax.grad(lambda p: jnp.sum(jnp.tanh(x @ p["w1"]) @ p["w2"]))(state["w"])
        m = jax.tree.map(lambda m, g: 0.9 * m + g, state["m"], grads)
        return {"w": jax.tree.map(lambda p, m: p - 0.1 * m, state["w"], m), "m": m}, jnp.sum(x)

    state = {"w": params, "m": jax.tree.map(jnp.zeros_like, params)}
    guessed = trace(step, state, jnp.ones((3, 4)))
    assert guessed.roles.count("slot") == 0  # the convention: argument 0 = parameters (momentum included)
    named = trace(step, state, jnp.ones((3, 4)), params="[0]['w']", opt_state='[0]["m"]')
    assert named.roles.how == "named paths" and named.roles.count("slot") == 2
    check_slots(named, 1)
    with pytest.raises(InputError, match=r"--params '\[0\]\.w': no such path .*\[0\]\['w'\]"):
        trace(step, state, jnp.ones((3, 4)), params="[0].w")
