"""`placeto train` for method placeto: the library call behind the flags.

placeto is the default method; the CLI module stays thin.
"""

from __future__ import annotations

import argparse

from placeto.checkpoint_io import check_init_model
from placeto.methods.placeto.config import PRESETS, parse_overrides
from placeto.methods.placeto.place import load_policy_params
from placeto.methods.placeto.train import train
from simulator.model.errors import InputError


def train_from_args(args: argparse.Namespace, graphs, clusters, workers=None) -> int:
    """Train (or resume) a Placeto run on `graphs` x `clusters` as the flags say.

    Flags: --config, --set, --episodes, --seed, --minutes, --init-from, --fresh. Prints a summary. `workers`: a
    placeto.rollouts.distributed.WorkerSpec (--workers).
    """
    try:
        changes = parse_overrides(args.set)
        changes.update({k: v for k, v in (("episodes", args.episodes), ("seed", args.seed),
                                          ("time_limit_minutes", args.minutes)) if v is not None})
        if args.init_from:
            changes["init_from"] = args.init_from
        config = PRESETS[args.config]().replace(**changes)
    except ValueError as e:
        raise InputError(str(e)) from None
    init = None
    if args.init_from:
        init_config, init = load_policy_params(args.init_from)
        check_init_model(init_config, config, args.init_from)
    summary = train(config, graphs, clusters, args.out, resume=not args.fresh, init_params=init, workers=workers)
    print(f"{args.out}: {summary.episodes} episodes ({summary.episodes - summary.start_episode} now, "
          f"{summary.wall_seconds:.0f} s, {summary.episodes_per_second:.2f} episodes/s, "
          f"{summary.sim_calls_per_second:.0f} simulator calls/s)")
    for key, runtime in sorted(summary.best_runtime.items()):
        print(f"  best {key}: {runtime / 1e3:.3f} ms -> {summary.best_placement_files.get(key, '')}")
    return 0
