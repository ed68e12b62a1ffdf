"""Imitation of search by the Placeto policy: can its greedy episode learn to place like local search?

Issue 10 asks the shipped general policy's greedy placement (no search) to come within 5% of local search at
1,000 calls on the nmt and ptb test splits. gdp's one-shot policy could not (expert_iteration.md: imitating
search-improved targets fits them and does not transfer; with 11x the training graphs it stays ~1.18x on ptb):
a one-shot policy sees no placement, so it must coordinate every node's device in one pass. Placeto's policy
places one node at a time and sees where the others are (the device one-hot, the start times, the share of the
node's parents and children on each device), so "follow the target" is a local decision it can learn.

Behaviour cloning on Placeto's MDP: each training graph's target is local search's placement after `--calls`
simulator calls (from the best list scheduler, as compare runs it), its devices renamed in order of first use
along the visit sequence (the episode starts with every node on device 0: the first node's device becomes 0,
the next new one 1, ...; devices are interchangeable, and this makes one name per target). Each step runs the
policy's episode on one graph with the target's device forced at every visit (teacher forcing, one simulator
call per step as in training) and takes one Adam step on the mean cross-entropy of the policy's distribution at
`--grad-steps` random visits against the target device (placeto.methods.placeto.gradient.policy_gradient with
advantage 1 and no entropy: the REINFORCE loss is then exactly that cross-entropy).

    PYTHONPATH=. python experiments/placeto_imitation.py --family ptb --start general --steps 3000 \\
        --eval-every 250 --extra-seeds 1,2,3,4,5,6,7,8 --save runs/imitate-ptb

Teacher forcing shows the policy only states on the target's path; its greedy episode leaves that path and
never learns back. `--dagger B` (DAgger, Ross et al. 2011) follows the label with probability B and the
policy's greedy action otherwise, and labels every visited state: the target's device for the node under the
renaming of the target's devices that agrees most with the placement so far (a state off the path is labelled
with the move that continues the target from there):

    PYTHONPATH=. python experiments/placeto_imitation.py --family ptb --start runs/imitate-ptb --steps 1500 \\
        --eval-every 250 --dagger 0.5 --extra-seeds 1,2,3,4,5,6,7,8 --tag ptb_dagger --save runs/dagger-ptb

Writes experiments/results/placeto_imitation_<tag>.md (tag: the family by default): after every `--eval-every`
steps, the cross-entropy, and the greedy episode's runtime (placeto.search.guided.greedy_with_prior, as
policy_eval.py runs it) over local search at 1,000 calls on the test split at 4 devices and on the first
`--train-eval` training graphs. `--save DIR` keeps the policy as a Placeto run directory (`placeto place
--checkpoint DIR` takes it) with the optimizer state and the table; rerunning with the same `--save` resumes.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import jax
import numpy as np
import optax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.imitation_common import (ROW, add_arguments, load_start, local_search, resume,  # noqa: E402
                                        reference_split, training_graphs, write_report)
from placeto.methods.placeto import env as E  # noqa: E402
from placeto.arguments import OneLineParser, float_in, int_in  # noqa: E402
from placeto.checkpoint_io import save_table_run  # noqa: E402
from placeto.methods.placeto.gradient import make_grad_fn, policy_gradient  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.methods.placeto.rollout import collect_rollout  # noqa: E402
from placeto.methods.placeto.place import load_policy_params  # noqa: E402
from placeto.methods.placeto.policy import make_policy  # noqa: E402
from placeto.search.guided import Prepared, greedy_with_prior, renaming  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402


def canonical(placement: np.ndarray, visit_seq: np.ndarray, n_devices: int) -> np.ndarray:
    """int32[N] `placement` with its devices renamed in order of first use along `visit_seq` (0, 1, ...; devices
    never used keep the remaining names in their order). Equal for placements that differ only in device names."""
    names = np.full(n_devices, -1, np.int64)
    nxt = 0
    for d in np.asarray(placement)[np.asarray(visit_seq)]:
        if names[d] < 0:
            names[d], nxt = nxt, nxt + 1
    unused = names < 0
    names[unused] = np.arange(nxt, n_devices)
    return names[np.asarray(placement)].astype(np.int32)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    add_arguments(p, start="general", steps=3000, calls=1000, eval_every=500)
    p.add_argument("--grad-steps", type=int_in(0, 10**6), default=64,
                   help="visits of each episode in the loss, drawn at random "
                        "(0: all; placeto.methods.placeto.gradient)")
    p.add_argument("--dagger", type=float_in(0.0, 1.0), default=1.0,
                   help="probability of following the label at a visit (1: teacher forcing; below 1: DAgger, the "
                        "policy's greedy action otherwise)")
    p.add_argument("--train-eval", type=int_in(0, 10**6), default=8, help="training graphs in the train column")
    args = p.parse_args(argv)
    loaded = load_start(args, load_policy_params, "placeto_imitation")
    if loaded is None:
        return 2
    config, params = loaded
    config = config.replace(grad_steps=args.grad_steps)
    policy, grad_fn = make_policy(config), make_grad_fn(make_policy(config))
    tasks = [(g, cluster_preset("placeto-k80", d)) for g in training_graphs(args) for d in args.devices]
    test, cl4, ls_test = reference_split(args)
    optimizer = optax.chain(optax.clip_by_global_norm(config.grad_clip), optax.adam(args.lr))
    opt_state = optimizer.init(params)
    contexts: dict[int, tuple] = {}

    def context(i: int):
        """(EnvContext, device arrays, canonical target int32[N], target objective us) of task i, made once."""
        if i not in contexts:
            g, cl = tasks[i]
            ctx = E.make_context(g, cl, config)
            target, runtime = local_search(g, cl, args.calls)
            contexts[i] = (ctx, jax.device_put(ctx.arrays), canonical(target, ctx.visit_seq, cl.n_devices), runtime)
        return contexts[i]

    def greedy_runtime(params, g, cl) -> float:
        with metered():
            placement, _, _ = greedy_with_prior(Prepared(config, params, policy, g, cl, 0.0))
        return simulate(g, placement, cl).runtime

    def evaluate(params) -> tuple[float, float]:
        train = [greedy_runtime(params, *tasks[i]) / context(i)[3] for i in range(min(args.train_eval, len(tasks)))]
        test_r = [greedy_runtime(params, g, cl4) / ls_test[g.name] for g in test]
        return float(np.mean(train)) if train else float("nan"), float(np.mean(test_r))

    save = Path(args.save) if args.save else None
    params, opt_state, first, rows = resume(args, params, opt_state)
    if not rows:
        rows = [(0, 0.0, float("nan"), *evaluate(params))]
        print(f"step 0: train greedy / target {rows[0][3]:.3f}, test greedy / local-search@1000 {rows[0][4]:.3f}",
              flush=True)
    rng = np.random.default_rng(first)
    t0, losses = time.perf_counter() - rows[-1][1], []
    for step in range(first, args.steps):
        ctx, arrays, target, _ = context(step % len(tasks))
        labels: list[int] = []
        act = functools.partial(_labelled_act, policy, params, arrays, target, ctx.visit_seq, ctx.cluster.n_devices,
                                args.dagger, rng, labels)
        ro = collect_rollout(policy, params, ctx, arrays, jax.random.key(0), 1, 0, act=act)
        ro = ro._replace(actions=np.asarray(labels, np.int32)[:, None])  # the loss: log pi(label | visited state)
        ones = np.ones((ctx.n_steps, 1))
        zeros = np.zeros((ctx.n_steps, 1, config.max_devices))
        grads, (_, nll, _) = policy_gradient(grad_fn, params, ctx, arrays, ro, ones, zeros, config, rng, 0.0)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        losses.append(nll)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            rows.append((step + 1, time.perf_counter() - t0, float(np.mean(losses)), *evaluate(params)))
            losses = []
            print(f"step {step + 1}: cross-entropy {rows[-1][2]:.3f}, train greedy / target {rows[-1][3]:.3f}, "
                  f"test greedy / local-search@1000 {rows[-1][4]:.3f}", flush=True)
            if save is not None:
                save_table_run(save, config, params, opt_state, step + 1, rows, ROW)
    episode = ("with the target's device forced at every visit (teacher forcing)" if args.dagger >= 1 else
               f"that follows the label with probability {args.dagger:g} and the policy's greedy action otherwise "
               "(DAgger; label: the target's device under the renaming that agrees most with the placement so far)")
    write_report(args, "placeto_imitation", argv, f"Imitation of local search by the Placeto policy on the {args.family} "
                 "family", f"targets: local search after {args.calls} calls, devices named in order of first use along "
                 f"the visit sequence; each step one episode {episode} and one Adam step (lr {args.lr:g}) on the mean "
                 f"cross-entropy over {args.grad_steps or 'all'} random visits. Greedy: one greedy episode (as "
                 "policy_eval.py). Train: the first training graphs' greedy over their targets.", len(tasks), rows,
                 "visit")
    return 0


def _labelled_act(policy, params, arrays, target: np.ndarray, visit_seq: np.ndarray, n_devices: int, follow: float,
                  rng: np.random.Generator, labels: list[int], obs) -> np.ndarray:
    """collect_rollout's `act` for one episode (B = 1): appends the visit's label to `labels` and returns the
    label with probability `follow`, else the policy's greedy action. The label is the target's device for the
    node under the renaming of the target's devices that agrees most with the current placement on the nodes
    visited so far (`placeto.search.guided.renaming`; no node visited: the target's own names),
    so a state off the target's path still has the label that continues it."""
    node, visited = int(obs.node), np.asarray(obs.placement)[0]
    if labels:
        seen = np.unique(visit_seq[:int(obs.t)])
        label = int(renaming(target[seen], visited[seen], n_devices)[target[node]])
    else:
        label = int(target[node])
    labels.append(label)
    if follow >= 1.0 or rng.random() < follow:
        return np.asarray([label], np.int32)
    return np.asarray(policy.act(params, arrays, obs, jax.random.key(0), True)[0])


if __name__ == "__main__":
    sys.exit(main())
