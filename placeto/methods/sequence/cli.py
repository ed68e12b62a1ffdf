"""`placeto train --method rnn|hierarchical`: the calls behind the flags.

The CLI module stays thin.
"""

from __future__ import annotations

import argparse

from placeto.config_fields import parse_overrides
from placeto.methods.sequence.pergraph import PerGraphConfig
from placeto.methods.sequence.rundir import train
from placeto.methods.sequence.specs import get_spec
from simulator.model.errors import InputError


def config_from_args(method: str, args: argparse.Namespace, devices: int) -> PerGraphConfig:
    """The method's config from the train flags and the cluster.

    The cluster gives the device count.

    Flags: --config (default/tiny), --set FIELD=VALUE, --episodes, --seed, --minutes.

    Raises:
      InputError: naming the field, on a bad value.
    """
    spec = get_spec(method)
    try:
        changes = parse_overrides(args.set, spec.config_cls)
        if changes.get("devices", devices) != devices:
            raise ValueError(f"--set devices={changes['devices']} but the cluster has {devices} devices")
        changes.update({k: v for k, v in (("episodes", args.episodes), ("seed", args.seed),
                                          ("time_limit_minutes", args.minutes), ("devices", devices))
                        if v is not None})
        return spec.presets[args.config]().replace(**changes)
    except (TypeError, ValueError) as e:
        raise InputError(str(e)) from None


def train_from_args(method: str, args: argparse.Namespace, graphs, clusters, workers=None) -> int:
    """Train or resume an rnn / hierarchical run as the flags say.

    Prints a summary.

    `workers`: a placeto.rollouts.distributed.WorkerSpec (--workers).
    """
    if args.family or len(graphs) != 1 or len(clusters) != 1:
        raise InputError(f"--method {method} trains one policy per graph and cluster (as the seeds): give one "
                         f"--graph and one --devices count (or --cluster)")
    if args.init_from:
        raise InputError(f"--init-from: {method} policies are trained from scratch on their graph")
    graph, cluster = graphs[0], clusters[0]
    config = config_from_args(method, args, cluster.n_devices)
    s = train(config, graph, cluster, args.out, resume=not args.fresh, progress=True, workers=workers)
    print(f"{args.out}: {method}, {s.updates} updates, {s.samples} placements ({s.updates - s.start_update} updates "
          f"now, {s.wall_seconds:.0f} s, {s.sim_calls_per_second:.0f} simulator calls/s)")
    print(f"  best {s.task}: {s.best_objective / 1e3:.3f} ms -> {s.best_file}")
    return 0
