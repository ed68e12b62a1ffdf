"""The teacher Placeto imitates, and how well a policy has learned it.

Training imitates, on the states the policy visits, the best single move at each step: the device of highest
immediate reward (`env.action_rewards`, every device simulated), the node's current device on ties
(counterfactual_loss "best": `train.best_device_targets` from `best_moves`; "improving" the same best where it is
a move that lowers the objective, `train.improving_targets`). Followed at every step, that rule is itself a placer, the teacher's sweep: one
pass over the visit order, D simulator calls per step, never worse than where it starts. A policy that learned it
perfectly would reach the teacher's sweep with one simulator call per step.

    teacher_sweep   the teacher's own pass from the episode's start
    imitation       a policy's greedy pass beside it: agreement with the best move at every state the policy
                    visits (the teacher's targets there), and both passes' objectives
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from placeto.methods.placeto import env as E
from placeto.methods.placeto.policy import Policy
from placeto.methods.placeto.rollout import collect_rollout

TIE = 1e-9  # rewards within this of a step's best tie (rewards are fractions of the single-device runtime)


class Sweep(NamedTuple):
    """One pass over the visit order."""

    placement: np.ndarray  # int32[N] the best placement the pass visited
    objective: float  # its objective (placeto.objective), microseconds
    moves: int  # steps that changed the node's device
    sim_calls: int


def best_moves(rewards: np.ndarray, current: np.ndarray) -> np.ndarray:
    """bool[..., D] the devices the teacher accepts at each state.

    rewards float[..., D] immediate reward of every device, current int[...] the node's device before the step:
    the current device alone where it ties for best, else every device within TIE of the best.
    """
    tied = rewards >= rewards.max(-1, keepdims=True) - TIE
    keep = np.take_along_axis(tied, current[..., None], axis=-1)
    stay = np.arange(rewards.shape[-1]) == current[..., None]
    return np.where(keep, stay, tied)


def teacher_sweep(ctx: E.EnvContext, placement: np.ndarray | None = None) -> Sweep:
    """The teacher's one pass: at each step the best device (`best_moves`; the lowest of several), from `placement`
    (default: the context's start). Deterministic; 1 + D calls per step."""
    state, _ = E.reset(ctx, 0, 1, placement)
    calls, moves, done = state.sim_calls, 0, ctx.n_steps == 0
    while not done:
        rewards = E.action_rewards(state)[0]
        calls += rewards.size
        node = ctx.visit_seq[state.t]
        current = int(state.placement[0, node])
        action = int(np.argmax(best_moves(rewards, np.asarray(current))))
        moves += action != current
        state, _, done = E.step(state, np.asarray([action], np.int32))
    return Sweep(state.best_placement[0].astype(np.int32), float(state.best_runtime[0]), moves,
                 calls + state.sim_calls)


class Imitation(NamedTuple):
    """A policy's greedy pass against the teacher, on one graph and cluster."""

    policy_objective: float  # the pass's best placement, microseconds
    teacher_objective: float  # the teacher's sweep from the same start, microseconds
    start_objective: float  # where both start, microseconds
    agreement: float  # steps where the policy's device is one the teacher accepts, of all steps
    move_recall: float  # of the steps whose teacher move is a move, those where the policy made one it accepts
    move_precision: float  # of the steps where the policy moved, those the teacher accepts (nan: no move)
    steps: int


def imitation(policy: Policy, params, ctx: E.EnvContext) -> Imitation:
    """The policy's greedy pass on ctx (every device simulated at every step, for the teacher's targets) and the
    teacher's sweep from the same start."""
    arrays = jax.device_put(ctx.arrays)
    ro = collect_rollout(policy, params, ctx, arrays, jax.random.key(0), 1, 0, greedy=True, counterfactual=True)
    t = np.arange(ctx.n_steps)
    current = ro.placement[t, 0, ro.nodes].astype(np.int64)  # [T]
    ok = best_moves(ro.action_rewards[:, 0], current)  # [T, D]
    took = ro.actions[:, 0]
    accepted = ok[t, took]
    teacher_moves = ~ok[t, current]
    moved = took != current
    sweep = teacher_sweep(ctx)
    return Imitation(float(ro.best_runtime[0]), sweep.objective, float(ro.initial_runtime[0]),
                     float(accepted.mean()) if len(t) else 1.0,
                     float((accepted & moved)[teacher_moves].mean()) if teacher_moves.any() else 1.0,
                     float(accepted[moved].mean()) if moved.any() else float("nan"), int(len(t)))
