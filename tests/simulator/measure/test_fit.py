"""simulator.measure.fit: the calibration graphs separate the cluster model's parameters, and the least-squares fit
recovers parameters it did not see from step times the simulator produced with them (no hardware)."""

import numpy as np
import pytest

from simulator.model.cluster import Cluster, Device
from simulator.measure.fit import PARAMS, calibration_probes, cluster_with, fit_cluster, format_fit, simulate_probes

BASE = Cluster("local", tuple(Device(f"/cpu:{i}", "local-cpu", 1e12) for i in range(2)), 0.0, 0.0, 1e3)
TASK_US = lambda out_bytes: max(1.0, out_bytes / 5000.0)  # noqa: E731  a 5 GB/s output fill
TRUTHS = [  # host-bound transfers (as measured on 2 shared cores), and latency- and bus-bound ones
    {"delta1_us": 8.0, "dispatch_us": 25.0, "delta2_us": 10.0, "us_per_mb": 200.0, "latency_us": 15.0,
     "transfer_us": 40.0},
    {"delta1_us": 3.0, "dispatch_us": 5.0, "delta2_us": 60.0, "us_per_mb": 50.0, "latency_us": 80.0,
     "transfer_us": 10.0},
]


def measured(truth, noise=0.0, seed=0):
    probes = calibration_probes(2, TASK_US)
    times = simulate_probes(probes, cluster_with(BASE, truth))
    times = times * (1 + noise * np.random.default_rng(seed).standard_normal(len(times)))
    return [p._replace(measured_us=float(t)) for p, t in zip(probes, times)]


@pytest.mark.parametrize("truth", TRUTHS)
def test_fit_recovers_the_parameters_that_made_the_times(truth):
    fit = fit_cluster(measured(truth), BASE)
    for k in PARAMS:
        assert fit.params[k] == pytest.approx(truth[k], rel=1e-3, abs=1e-3), (k, fit.params)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9) and fit.rms_relative < 1e-6
    assert np.allclose(fit.residual_us, 0.0, atol=1e-3)
    c = fit.cluster
    assert [d.host for d in c.devices] == ["host", "host"] and c.hosts[0].dispatch_us == pytest.approx(
        truth["dispatch_us"], rel=1e-3)
    assert c.bandwidth_bytes_per_us == pytest.approx(1e6 / truth["us_per_mb"], rel=1e-3)


def test_fit_with_noise_reports_the_residuals():
    truth = TRUTHS[0]
    fit = fit_cluster(measured(truth, noise=0.03), BASE)
    assert 0.99 < fit.r2 < 1.0 and 0.005 < fit.rms_relative < 0.06
    for k in ("delta1_us", "dispatch_us", "us_per_mb", "transfer_us"):  # the well-determined ones
        assert fit.params[k] == pytest.approx(truth[k], rel=0.25), (k, fit.params)
    text = format_fit(fit)
    assert "R^2 0.99" in text and all(name in text for name in fit.names)


def test_the_probes_separate_every_parameter():
    """Changing any one parameter by 10 us (or 50 us/MB) changes some probe's simulated step time."""
    probes = calibration_probes(2, TASK_US)
    base = simulate_probes(probes, cluster_with(BASE, TRUTHS[0]))
    for k in PARAMS:
        moved = dict(TRUTHS[0], **{k: TRUTHS[0][k] + (50.0 if k == "us_per_mb" else 10.0)})
        assert np.any(simulate_probes(probes, cluster_with(BASE, moved)) != base), k


def test_one_device_fits_delta1_only():
    one = Cluster("one", (Device("/cpu:0", "local-cpu", 1e12),), 0.0, 0.0, 1e3)
    probes = calibration_probes(1, TASK_US)
    assert [p.name for p in probes] == ["chain"]
    truth = {"delta1_us": 12.0, "dispatch_us": 0.0, "delta2_us": 0.0, "us_per_mb": 1e-3, "latency_us": 0.0,
             "transfer_us": 0.0}
    times = simulate_probes(probes, cluster_with(one, truth))
    fit = fit_cluster([p._replace(measured_us=float(t)) for p, t in zip(probes, times)], one, free=("delta1_us",),
                      fixed={"us_per_mb": 1e-3})
    assert fit.params["delta1_us"] == pytest.approx(12.0, rel=1e-6) and fit.params["dispatch_us"] == 0.0


def test_unmeasured_probes_are_refused():
    with pytest.raises(ValueError, match="measured"):
        fit_cluster(calibration_probes(2, TASK_US), BASE)


def test_held_out_predictions_recover_times_made_by_other_parameters():
    """A graph's placements 'measured' with per-op and per-transfer costs unlike the calibration's: the
    calibrated model is off, the leave-one-out fit on the other placements predicts every one closely, and no
    fold sees the placement it predicts (an outlier stays an outlier)."""
    from simulator.measure.fit import held_out_predictions
    from simulator.model.generate import layered_dag

    graph = layered_dag(60, seed=3)
    kind_graph = graph.with_costs("local-cpu", graph.cost_for(graph.kinds[0]))
    rng = np.random.default_rng(0)
    placements = [np.zeros(60, np.int32), np.arange(60, dtype=np.int32) % 2]
    placements += [rng.integers(0, 2, 60).astype(np.int32) for _ in range(5)]
    truth = dict(TRUTHS[0], dispatch_us=45.0, transfer_us=70.0)
    calibrated = dict(TRUTHS[0])
    from simulator.engine.fast import simulate

    true_us = np.array([simulate(kind_graph, p, cluster_with(BASE, truth)).runtime for p in placements])
    calib_us = np.array([simulate(kind_graph, p, cluster_with(BASE, calibrated)).runtime for p in placements])
    assert np.median(np.abs(calib_us / true_us - 1)) > 0.05
    pred = held_out_predictions(kind_graph, placements, true_us, calibrated, BASE)
    assert np.median(np.abs(pred / true_us - 1)) < 0.01
    skewed = true_us.copy()
    skewed[3] *= 3.0  # a placement measured 3x slow: its prediction comes from the others only
    pred = held_out_predictions(kind_graph, placements, skewed, calibrated, BASE)
    assert pred[3] < 0.5 * skewed[3]
