"""The teacher: its accepted devices, its sweep (never worse than its start, each step the best single move), and
the imitation figures of a policy."""

import jax
import numpy as np

from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.policy import make_policy
from placeto.methods.placeto.teacher import best_moves, imitation, teacher_sweep
from simulator import cluster_preset, simulate
from simulator.model.generate import layered_dag


def test_best_moves_keep_the_current_device_on_ties():
    rewards = np.array([[0.0, 0.5, 0.5], [0.2, 0.2, 0.1], [0.0, 0.0, 0.0]])
    current = np.array([0, 1, 2])
    np.testing.assert_array_equal(best_moves(rewards, current),
                                  [[False, True, True], [False, True, False], [False, False, True]])


def test_the_sweep_takes_the_best_single_move_at_every_step():
    g, cluster = layered_dag(25, seed=1), cluster_preset("placeto-k80", 3)
    ctx = E.make_context(g, cluster, tiny(init_placement="random"))
    sweep = teacher_sweep(ctx)
    state, _ = E.reset(ctx, 0, 1)
    start = float(state.runtime[0])
    assert sweep.objective <= start
    assert simulate(g, sweep.placement, cluster).runtime == sweep.objective  # memory fits on K80s
    # Replaying: at every step no device beats the one the sweep chose.
    for node in ctx.visit_seq:
        rewards = E.action_rewards(state)[0]
        action = int(np.argmax(best_moves(rewards, np.asarray(state.placement[0, node]))))
        assert rewards[action] >= rewards.max() - 1e-9
        state, _, _ = E.step(state, np.asarray([action], np.int32))
    assert float(state.best_runtime[0]) == sweep.objective
    again = teacher_sweep(ctx)  # deterministic
    assert np.array_equal(again.placement, sweep.placement) and again.objective == sweep.objective


def test_imitation_figures_are_fractions_and_the_pass_is_the_policys():
    g, cluster = layered_dag(20, seed=2), cluster_preset("placeto-k80", 2)
    config = tiny(init_placement="etf")
    policy = make_policy(config)
    ctx = E.make_context(g, cluster, config)
    params = policy.init(jax.random.key(0), ctx.arrays)
    im = imitation(policy, params, ctx)
    assert 0.0 <= im.agreement <= 1.0 and 0.0 <= im.move_recall <= 1.0 and im.steps == g.n_nodes
    assert im.policy_objective <= im.start_objective and im.teacher_objective <= im.start_objective
