"""Expert iteration for a gdp policy: does imitating search-improved placements improve the zero-shot placement?

Issue 10 asks the shipped general policy's greedy placement to come within 5% of local search at 1,000 calls on
the nmt and ptb test splits. This measures one way there (Anthony et al. 2017, "Thinking Fast and Slow"): on
each training graph in turn, the policy's greedy placement (argmax per node, one forward pass), or the graph's
target so far if that is better, starts a hill-climbing local search of `--calls` simulator calls; the better
of its result and the old target becomes the graph's target, and the policy takes `--epochs` Adam steps of
cross-entropy toward it (mean over the nodes). The search starts from the policy's own placement, so the target
names the (identical) devices as the policy does.

    PYTHONPATH=. python experiments/expert_iteration.py --family ptb --start gdp-ptb --steps 4000

With 24 training graphs the policy memorises their targets and the test split gets worse. `--extra-seeds 1,2,...`
adds the 32 graphs of each further seed of the family (built by `placeto.families.build` under `--graphs-root`
on first use, ~1.5 s a graph; disjoint from the seed-0 test split) to the training tasks:

    PYTHONPATH=. python experiments/expert_iteration.py --family ptb --start gdp-ptb --steps 4000 \
        --extra-seeds 1,2,3,4,5,6,7,8 --tag ptb_more

Writes experiments/results/expert_iteration_<tag>.md (tag: the family by default): after every `--eval-every`
steps, the cross-entropy, the training graphs' greedy runtime over their targets, and the test split's greedy
runtime over local search with 1,000 calls (mean over the graphs; 4 devices for the test split as in
shipped_policies.md). `--save DIR` writes the policy there as a gdp run directory (config.json,
checkpoint.msgpack: params, optimizer state, step and the table so far) after every evaluation; rerunning the
command with the same `--save` resumes from it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.imitation_common import (ROW, add_arguments, load_start, resume, reference_split,  # noqa: E402
                                        training_graphs, write_report)
from placeto.arguments import POSITIVE, OneLineParser  # noqa: E402
from placeto.baselines import run_method  # noqa: E402
from placeto.checkpoint_io import save_table_run  # noqa: E402
from placeto.methods.gdp.model import log_policy, make_net  # noqa: E402
from placeto.methods.gdp.place import greedy_placement, load_run  # noqa: E402
from placeto.methods.gdp.ppo import make_task  # noqa: E402
from placeto.objective import score_one  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    add_arguments(p, start="gdp-ptb", steps=4000, calls=300, eval_every=800)
    p.add_argument("--epochs", type=POSITIVE, default=4, help="Adam steps per target")
    args = p.parse_args(argv)
    loaded = load_start(args, load_run, "expert_iteration")
    if loaded is None:
        return 2
    config, params = loaded
    net = make_net(config)
    tasks = [make_task(g, cluster_preset("placeto-k80", d), config) for g in training_graphs(args)
             for d in args.devices]
    test, cl4, ls = reference_split(args)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(args.lr))
    opt_state = optimizer.init(params)

    @jax.jit
    def update(params, opt_state, x, y):
        def loss(p):
            lp = log_policy(net, p, x)
            mask = x.node_mask.astype(jnp.float32)
            return -(lp[jnp.arange(lp.shape[0]), y] * mask).sum() / mask.sum()

        def epoch(carry, _):
            p, s = carry
            value, grad = jax.value_and_grad(loss)(p)
            u, s = optimizer.update(grad, s, p)
            return (optax.apply_updates(p, u), s), value

        (params, opt_state), values = jax.lax.scan(epoch, (params, opt_state), None, length=args.epochs)
        return params, opt_state, values[0]

    def greedy(params, task) -> np.ndarray:
        return greedy_placement(config, params, task.graph, task.cluster)

    def score(task, placement) -> float:
        return score_one(task.graph, placement, task.cluster)[0]

    def test_ratio(params) -> float:
        return float(np.mean([simulate(g, greedy_placement(config, params, g, cl4), cl4).runtime / ls[g.name]
                              for g in test]))

    save = Path(args.save) if args.save else None
    params, opt_state, first, rows = resume(args, params, opt_state)
    if not rows:
        rows = [(0, 0.0, float("nan"), float("nan"), test_ratio(params))]
        print(f"step 0: test greedy / local-search@1000 {rows[0][4]:.3f}", flush=True)
    targets: dict[str, tuple[np.ndarray, float]] = {}
    t0, loss = time.perf_counter() - rows[-1][1], float("nan")
    for step in range(first, args.steps):
        task = tasks[step % len(tasks)]
        start = greedy(params, task)
        if task.key in targets and targets[task.key][1] < score(task, start):
            start = targets[task.key][0]
        found = run_method("local-search", task.graph, task.cluster, step, budget=args.calls, init=start,
                           t0=0.0).placement
        found_score = score(task, found)
        if task.key not in targets or found_score < targets[task.key][1]:
            targets[task.key] = (found, found_score)
        y = np.zeros(task.inputs.node_mask.shape[0], np.int32)
        y[:task.graph.n_nodes] = targets[task.key][0]
        params, opt_state, loss = update(params, opt_state, task.inputs, jnp.asarray(y))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            train = float(np.mean([score(t, greedy(params, t)) / targets[t.key][1] for t in tasks
                                   if t.key in targets]))
            rows.append((step + 1, time.perf_counter() - t0, float(loss), train, test_ratio(params)))
            print(f"step {step + 1}: cross-entropy {float(loss):.3f}, train greedy / target {train:.3f}, "
                  f"test greedy / local-search@1000 {rows[-1][4]:.3f}", flush=True)
            if save is not None:
                save_table_run(save, config, params, opt_state, step + 1, rows, ROW)
    write_report(args, "expert_iteration", argv, f"Expert iteration on the {args.family} family (gdp)",
                 f"each step, local search ({args.calls} calls, hill climbing) from the policy's greedy placement or "
                 f"the task's target so far improves the target, then {args.epochs} Adam steps (lr {args.lr:g}) of "
                 "cross-entropy toward it. Train: the training tasks' greedy over their targets.", len(tasks), rows,
                 "node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
