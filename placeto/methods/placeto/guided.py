"""A trained Placeto policy placing under a budget: sampling, tuning, search.

Zero-shot episodes, fine-tuning, policy-guided search. Everything here runs inside the caller's meter
(`placeto.objective.metered`): simulations are counted there and the searches stop when its calls or wall
seconds are spent. One-time costs (loading the parameters, jit compilation of the policy for the graph's
padding bucket) happen in `prepare`, which reports them apart.

`placeto-search` (`guided_search`), beyond Placeto (compare REGAL's learned prior for a genetic search):
  1. one greedy episode of the policy (cut short after POLICY_SHARE of a wall-clock budget; message passing
     refreshed every SEARCH_REFRESH steps, `greedy_with_prior`); at each step the policy's device distribution
     for the node it places is kept as that node's prior (float[N, D]);
  2. the best of that episode's placements, of `samples` placements drawn from the prior (one batch of
     simulations, no policy calls) and of the list schedulers' (etf, heft, single) starts the search; when a
     list scheduler's wins, the prior is relabelled to its device names (the device permutation that best
     matches the greedy placement, by linear assignment), since identical devices may be named differently;
  3. simulated annealing (`sa.anneal`, node and block moves as in `sa`) whose moves take their target device
     from the prior with probability `prior_prob` (a neighbour's device or another one otherwise), and whose
     nodes are drawn more often where the policy is unsure (weight x (0.5 + normalised entropy of the prior)).
On a graph too large for the policy (`placeto.coarsen`) the policy places its groups; the search runs on the
groups for GROUP_SHARE of the time left, then on the ops from the best expanded placement, every op taking its
group's prior (the share: `experiments/results/ablations/group_search.md`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from placeto import coarsen
from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import PlacetoConfig
from placeto.baselines import MethodRun
from placeto.baselines.common import NotApplicable, batch_size, evaluate
from placeto.compile_time import excluded
from placeto.features import SCHEDULE_CHANNELS
from placeto.objective import meter, metered
from placeto.methods.placeto.place import load_policy_params
from placeto.policies import resolve_checkpoint
from placeto.methods.placeto.policy import Policy, make_policy
from placeto.methods.placeto.rollout import collect_rollout
from placeto.methods.placeto.train import finetune_params
from placeto.methods.prior import relabel_prior, renaming, search_from_prior  # noqa: F401  (renaming: re-exported)
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


# greedy_with_prior refreshes the message passing every config.embed_every steps by default: the policy's own
# greedy pass (`placeto place`), the one it was trained with (a refresh every step is another policy, which
# placed nmt_004 worse: experiments/README.md, "Figures behind design choices")
SEARCH_REFRESH = 16  # a faster prior leaves placeto-search more time (experiments/README.md, search_refresh)


POLICY_SHARE = 0.4  # largest share of a wall-clock budget placeto-search spends in the policy's greedy episode
GROUP_SHARE = 0.3  # share of the rest spent searching the groups of a coarsened graph before its ops


@dataclasses.dataclass
class Prepared:
    """A policy ready to run on one (graph, cluster).

    Compiled for the graph's padding bucket.
    """

    config: PlacetoConfig
    params: Any
    policy: Policy
    graph: Graph
    cluster: Cluster
    compile_seconds: float  # parameter loading + jit compilation (excluded from the method's budget)
    seen: tuple[np.ndarray, float] | None = None  # best (placement, objective) visited while fine-tuning
    update_seconds: float = 0.0  # wall seconds of one fine-tuning update (a throw-away one after compilation), with
    # `finetuning`; 0 without


@functools.lru_cache(maxsize=16)
def _load(checkpoint: str) -> tuple[PlacetoConfig, Any]:
    return load_policy_params(checkpoint)


def prepare(checkpoint: str | Path | None, graph: Graph, cluster: Cluster, sampling: bool = True,
            finetuning: bool = False) -> Prepared:
    """Load the policy; compile what the methods run for `graph`'s padding bucket.

    The policy: a shipped name, a run directory, or None (the default shipped policy). Compiled: the batch-1
    log-probabilities of the greedy episode and, with `sampling`, the sampling step at the config's
    episodes_per_update; with `finetuning`, the gradient and update functions (by a throw-away update of a copy,
    outside any budget) and the duration of one update (a second one, timed: `finetune` starts an update only if
    it fits before the deadline).
    """
    t0 = time.perf_counter()
    config, params = _load(str(resolve_checkpoint(checkpoint)))
    if cluster.n_devices > config.max_devices:
        raise NotApplicable(f"{checkpoint or 'the default policy'} places on at most {config.max_devices} devices "
                            f"(max_devices), the cluster has {cluster.n_devices}")
    policy = make_policy(config)
    ctx = E.make_context(graph, cluster, config)
    arrays = jax.device_put(ctx.arrays)
    zeros = np.zeros((1, ctx.n_pad), np.int32)
    schedule = np.zeros((1, ctx.n_pad, SCHEDULE_CHANNELS), np.float32)
    one = (params, arrays, zeros, schedule, np.zeros(1, np.int32), np.zeros(1, np.int32))
    jax.block_until_ready(policy.log_probs(*one))
    jax.block_until_ready(policy.head_log_probs(*one, policy.embed(*one)))
    if sampling:  # what collect_rollout calls (placeto.methods.placeto.rollout)
        _, obs = E.reset(ctx, 0, config.episodes_per_update)
        if policy.embed_every == 1:
            jax.block_until_ready(policy.act(params, arrays, obs, jax.random.key(0), False))
        else:
            _, _, h = policy.act_refresh(params, arrays, obs, jax.random.key(0), False)
            jax.block_until_ready(policy.act_stale(params, arrays, obs, jax.random.key(0), False, h))
    if finetuning:
        with metered():  # its simulations are not charged to anyone
            finetune_params(config, params, graph, cluster, config.episodes_per_update, 0)  # compiles
            t1 = time.perf_counter()
            finetune_params(config, params, graph, cluster, config.episodes_per_update, 0)  # times one update
            update_s = time.perf_counter() - t1
    return Prepared(config, params, policy, graph, cluster, time.perf_counter() - t0,
                    update_seconds=update_s if finetuning else 0.0)


def greedy_with_prior(prep: Prepared, ctx: E.EnvContext | None = None, refresh: int | None = None,
                      deadline: float = np.inf, whole: bool = False) -> tuple[np.ndarray, float, np.ndarray]:
    """One greedy episode: (best placement int32[N], its objective, prior float64[N, D]).

    The prior of a node is the policy's device distribution at its last visit; nodes never reached before the
    meter ran out (or before `deadline`, a perf_counter time) keep a uniform prior; with `whole`, the episode runs
    to its end whatever the meter says (the `placeto` method's floor: its zero-shot placement). refresh (default:
    the policy's config.embed_every, its own greedy pass, as `placeto place` runs it): recompute the
    message-passing embeddings every `refresh` steps and reuse them in between (the scoring head always sees the
    current placement); larger is faster (the removed fast_greedy ablation: its figures in experiments/README.md).
    """
    ctx = ctx or E.make_context(prep.graph, prep.cluster, prep.config)
    arrays = jax.device_put(ctx.arrays)
    refresh = prep.config.embed_every if refresh is None else refresh
    d, pol = prep.cluster.n_devices, prep.policy
    prior = np.full((ctx.n_nodes, d), 1.0 / d)
    state, obs = E.reset(ctx, 0, 1)
    m, done, h = meter(), ctx.n_steps == 0, None
    while not done and (whole or (not m.exhausted() and time.perf_counter() < deadline)):
        args = (prep.params, arrays, obs.placement, obs.schedule, np.asarray([obs.node]), np.asarray([obs.t]))
        if refresh <= 1:
            logp = pol.log_probs(*args)
        else:
            if h is None or state.t % refresh == 0:
                h = pol.embed(*args)
            logp = pol.head_log_probs(*args, h)
        logp = np.asarray(logp)[0, :d]
        p = np.exp(logp - logp.max())
        prior[int(obs.node)] = p / p.sum()
        state, _, done = E.step(state, np.asarray([int(np.argmax(logp))], np.int32))
        obs = E.observe(state)
    return state.best_placement[0].astype(np.int32), float(state.best_runtime[0]), prior


def policy_place(prep: Prepared, seed: int = 0, budget: float = np.inf) -> np.ndarray:
    """The `placeto` method: one whole greedy episode, then sampled batches in budget.

    The greedy episode runs whole whatever the budget (the policy's zero-shot placement, so the method never
    returns worse; a budget it cannot pay for is overspent, and compare marks the row), then batches of sampled
    episodes while the budget lasts (calls in `budget` and the meter's). Returns the best placement any episode
    visited.
    """
    ctx = E.make_context(prep.graph, prep.cluster, prep.config)
    arrays = jax.device_put(ctx.arrays)
    m, calls0 = meter(), meter().calls
    t0 = time.perf_counter()
    best, best_score, _ = greedy_with_prior(prep, ctx, whole=True)
    if prep.seen is not None and prep.seen[1] < best_score:
        best, best_score = prep.seen
    key, i = jax.random.key(seed), 0
    batch = prep.config.episodes_per_update
    last = 2.0 * (time.perf_counter() - t0)  # a sampled batch takes ~2 greedy episodes (experiments/README.md)
    # another batch only if it fits in the call budget (an episode simulates at most once per step) and,
    # as far as the last batch's duration tells, in the time left
    while (not m.exhausted() and m.calls - calls0 + batch * ctx.n_steps <= budget
           and m.seconds_left() > last):
        t0 = time.perf_counter()
        ro = collect_rollout(prep.policy, prep.params, ctx, arrays, jax.random.fold_in(key, i), batch, seed + i,
                             record=False)
        last = time.perf_counter() - t0
        i += 1
        b = int(np.argmin(ro.best_runtime))
        if ro.best_runtime[b] < best_score:
            best, best_score = ro.best_placement[b].astype(np.int32), float(ro.best_runtime[b])
    return best


def guided_search(prep: Prepared, seed: int = 0, budget: float = np.inf, prior_prob: float = 0.3,
                  neighbour_prob: float = 0.8, batch: int = 16, block_prob: float = 0.5,
                  samples: int = 32, op_graph: Graph | None = None, op_to_group: np.ndarray | None = None,
                  group_share: float = GROUP_SHARE, refresh: int = SEARCH_REFRESH) -> np.ndarray:
    """The `placeto-search` method: the best placement found, int32[N].

    See the module docstring.

    Args:
      samples: placements drawn node by node from the prior (no policy calls) and scored in one batch; the best of
        them competes with the greedy episode's and the list schedulers' placements for the start.
      refresh: the greedy episode's `greedy_with_prior(refresh=...)`.
      op_graph, op_to_group: int[N ops]; `prep.graph` is the grouping of the larger `op_graph` (`placeto.coarsen`).
        The policy places the groups; the search runs on the groups for `group_share` of what is left of the
        budget (cheap simulations, moves of whole groups), then on the op graph from the best of the expanded
        placements, every op taking its group's prior (N = ops): the groups alone stop at the grouping's optimum,
        the ops alone move too little per call on a large graph.
    """
    m, calls0 = meter(), meter().calls
    # the policy's episode gets at most POLICY_SHARE of a wall-clock budget: large graphs still get searched
    greedy, greedy_score, prior = greedy_with_prior(prep, refresh=refresh,
                                                    deadline=m.start + POLICY_SHARE * (m.deadline - m.start))
    extra = [prep.seen] if prep.seen is not None else []
    rng = np.random.default_rng(seed)
    search = functools.partial(search_from_prior, prior_prob=prior_prob, neighbour_prob=neighbour_prob,
                               batch=batch, block_prob=block_prob, samples=samples)
    if op_graph is None:
        if m.exhausted():  # fine-tuning or the episode spent the budget: the best placement either reached
            return min([(greedy, greedy_score), *extra], key=lambda c: c[1])[0]
        return search(prep.graph, prep.cluster, greedy, greedy_score, prior, rng, calls0 + budget, extra)
    starts, group_scores = [greedy, *(p for p, _ in extra)], [greedy_score, *(o for _, o in extra)]
    if group_share > 0 and not m.exhausted():  # the groups' search, under its own meter: their objectives
        # are not the op graph's
        calls = np.floor(group_share * min(calls0 + budget - m.calls, m.calls_left()))  # whole calls (or inf)
        with metered(max_calls=calls, seconds=group_share * m.seconds_left()) as sub:
            starts.append(search(prep.graph, prep.cluster, greedy, greedy_score, prior, rng, calls, extra))
        m.calls += sub.calls
        group_scores.append(min(sub.best, *group_scores))  # the search returns the best it saw, its starts included
    starts = np.stack([p[op_to_group] for p in starts])
    if batch_size(len(starts), calls0 + budget) < len(starts):  # no calls left to score the expansions: the best
        return starts[int(np.argmin(group_scores))]  # on the groups
    scores = evaluate(op_graph, starts, prep.cluster)
    best = int(np.argmin(scores))
    if m.exhausted():
        return starts[best]
    prior = relabel_prior(prior[op_to_group], starts[0], starts[best])  # to the device names of the start
    return search(op_graph, prep.cluster, starts[best], float(scores[best]), prior, rng, calls0 + budget)


def finetune(prep: Prepared, episodes: int, seed: int = 0) -> Prepared:
    """A copy of the policy trained `episodes` more episodes on prep's graph alone.

    REINFORCE with the config's settings and a fresh optimizer; stops early when the meter is spent, and does not
    start an update that, as far as the last one's duration tells (the first: prep.update_seconds), would not end
    before the meter's deadline. Its simulations count in the meter.
    """
    if episodes <= 0:
        return prep
    params, best, score = finetune_params(prep.config, prep.params, prep.graph, prep.cluster, episodes, seed,
                                          first_update_seconds=prep.update_seconds)
    return dataclasses.replace(prep, params=params, seen=(best, score))


def run_learned(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = None,
                seconds: float | None = None, checkpoint: str | Path | None = None,
                finetune_episodes: int = 0) -> tuple[MethodRun, float]:
    """(MethodRun, compile seconds) of Placeto's compare row `name`, inside one meter.

    "placeto": greedy + sampled episodes; "placeto-search": policy-guided search; with the Placeto policy
    `checkpoint` (None: the default shipped one), fine-tuned first if asked (placeto.harness.compare.run_learned).

    The policy places a graph of more than `coarsen.MAX_POLICY_NODES` nodes as groups (`placeto.coarsen`; the
    grouping's seconds are charged to the run): "placeto" expands the best group placement (its trace is the
    grouped graph's), "placeto-search" searches the op graph from the expanded placement and prior.
    """
    coarse = coarsen.for_policy(graph)
    prep = prepare(checkpoint, coarse.graph, cluster, sampling=name == "placeto" or finetune_episodes > 0,
                   finetuning=finetune_episodes > 0)
    calls = math.inf if budget is None else budget
    with metered(max_calls=calls, seconds=None if seconds is None else max(seconds - coarse.seconds, 1e-3)) as m, \
            excluded(m) as jit:  # a compilation met inside moves the deadline, reported with the compile seconds
        tuned = finetune(prep, finetune_episodes, seed)
        left = calls - m.calls
        if name == "placeto":  # on a coarsened graph: the best group placement, expanded
            placement = coarse.expand(policy_place(tuned, seed, left))
        elif coarse.grouping is None:
            placement = guided_search(tuned, seed, left)
        else:  # the policy places the groups, the search the ops
            placement = guided_search(tuned, seed, left, op_graph=graph, op_to_group=coarse.grouping.op_to_group)
        elapsed = m.elapsed() - jit.seconds
    trace = tuple((t + coarse.seconds, c, b) for t, c, b in m.trace)
    return MethodRun(np.asarray(placement, np.int32), m.calls, elapsed + coarse.seconds, trace, jit.seconds), \
        prep.compile_seconds + jit.seconds
