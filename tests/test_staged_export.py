"""simulator.hardware.units_plan(stages=True) on an exported program (simulator.export): the stages of exported
units compute the step, step after step, also when two device indices name one physical device (a device_put
there returns the very array, so received copies must not be donated)."""

import sys

import jax
import numpy as np

from simulator.trace import Source, trace
from test_import_models import EXAMPLES, example  # noqa: F401  (the import-jax --export fixture)


def test_staged_exported_units_compute_the_step(example):  # noqa: F811
    from simulator import export, hardware
    from simulator.io import load_graph

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
    values = hardware.leaf_values(traced, args)
    reference = jax.tree.leaves(jax.jit(ex.train_step)(*args))
    want = [x for x, a in zip(reference, traced.outputs) if isinstance(a, Source)]
    for placement in (np.zeros(grouped.n_nodes, int), np.arange(grouped.n_nodes) % 2):
        plan = hardware.units_plan(bundle.units, values, placement, jax.devices()[:1] * 2, bundle.outputs, None,
                                   bundle.cache, None, stages=True)
        assert sum(t.fn is not None for t in plan.tasks) <= grouped.n_nodes
        for _ in range(2):  # the second step reads the resident values again
            flat, _ = hardware.run_plan(plan)
        assert len(flat) == len(want)
        for a, b in zip(flat, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
