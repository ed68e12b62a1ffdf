"""simulator.measure.profile: measured per-node times on the local backend."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import simulator.measure.profile as profile
from simulator.model.errors import InputError
from simulator.tracing.trace import trace

from tests.helpers.programs import mlp_step


@pytest.fixture(scope="module")
def traced():
    return trace(*mlp_step())


def test_profile_positive_and_cached(traced, monkeypatch):
    calls = []
    real = profile.time_equation
    monkeypatch.setattr(profile, "time_equation", lambda eqn, *a: calls.append(eqn) or real(eqn, *a))
    times = profile.profile_graph(traced, repeats=2, warmup=1)
    g = traced.graph
    assert times.shape == (g.n_nodes,) and times.dtype == np.float64
    is_eqn = np.array([e is not None for e in traced.equations])
    assert np.all(np.isfinite(times)) and np.all(times[is_eqn] > 0) and np.all(times[~is_eqn] == 0)
    assert len(calls) < is_eqn.sum()  # identical equations (e.g. the three tanh backward muls) timed once
    sigs = [profile.equation_signature(e) for e in traced.equations if e is not None]
    assert len(calls) == len(set(sigs))


def test_annotate_measured(traced):
    kind = profile.local_kind()
    assert kind == jax.devices()[0].platform
    g = profile.annotate_measured(traced.graph, traced, repeats=1, warmup=1)
    assert kind in g.kinds and np.all(g.cost_for(kind) >= 0)
    info = g.meta["profile"][kind]
    assert info["repeats"] == 1 and info["dispatch_overhead_us"] > 0
    with pytest.raises(InputError):
        profile.profile_graph(traced, repeats=0)


def test_control_flow_node_is_timed_whole():
    def fn(x):
        return jax.lax.scan(lambda c, a: (c * a + 1.0, jnp.sin(c)), 0.0, x)[1]

    t = trace(fn, jnp.ones(64))
    scan = t.graph.ops.index("scan")
    times = profile.profile_graph(t, repeats=2, warmup=1)
    assert np.isfinite(times[scan]) and times[scan] > 0
