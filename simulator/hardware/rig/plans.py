"""A placed `Plan` put on a process rig: per-worker instruction lists.

`to_rig(plan, rig)` turns a `simulator.hardware.dispatch.Plan` (staged or not, as `simulator.hardware.plans`
builds it on the parent's JAX devices) into a `RigPlan` on a `simulator.hardware.rig.pool.ProcessRig`, as Alpa's
runtime turns a placement into per-device instruction lists compiled once and replayed every step:

* every task with work becomes a `Run` on its device's worker, its jitted fn exported with `jax.export` in the
  parent (`Exported.serialize()`, cached per function and input shapes) and loaded once per worker (a plan's new
  stages in one request per worker, every worker at once); each compiles in its first run;
* every send of the plan (one per producer task and receiving device) becomes a `Send` on the producer's worker
  and a `Recv` on the receiver's, placed right before the first stage there that reads one of its values; the
  values go through one shared memory block per plan, each at its own 64-byte-aligned offset;
* resident values (`plan.resident`: parameters, optimizer state, the batch, constants) are sent to their worker
  once; with a `scope` (e.g. one per program) a value already sent under the same scope, value and device is
  reused by later plans, so trying many placements of one graph uploads its parameters once per device.

`RigPlan.run_step()` runs one step (every worker at once, the parent waiting for all), `RigPlan.events` holds the
last step's measured events per worker (`simulator.hardware.rig.worker.Event`: stage runs, sends, receives, in
`perf_counter_ns`), `RigPlan.outputs()` fetches the step's outputs as numpy arrays (pytree, as
`simulator.hardware.dispatch.run_outputs` gives them). `simulator.hardware.timing` times a RigPlan as it times a
Plan.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from simulator.hardware.dispatch import Const, Plan
from simulator.hardware.rig.pool import ProcessRig
from simulator.hardware.rig.worker import Event, Recv, Run, Send, Slot
from simulator.model.errors import InputError

ALIGN = 64  # bytes: every value in a shared memory block starts at a multiple of this


class RigPlan:
    """A plan loaded on a process rig's workers (see the module docstring).

    close() frees it there.
    """

    def __init__(self, rig: ProcessRig, plan_id: int, workers: tuple[int, ...], outputs: tuple, out_tree: Any,
                 task_devices: tuple[int, ...], task_units: tuple[tuple[int, ...], ...], block: str | None,
                 owned: dict[int, list[int]], block_bytes: int):
        self.rig, self.id, self.workers = rig, plan_id, workers
        self.flat_outputs, self.out_tree = outputs, out_tree  # per output: (device, value id) or Const
        self.task_devices, self.task_units = task_devices, task_units  # per task of the source plan
        self.block, self.owned, self.block_bytes = block, owned, block_bytes
        self.n_stages = 0  # Run instructions on all workers (set by to_rig)
        self.events: dict[int, list[Event]] = {}  # worker -> events of the last step
        self.n_devices = rig.n_devices
        self.closed = False

    def run_step(self) -> None:
        """Runs one step on every worker; the parent waits for all.

        Raises:
          RigError: a worker failed.
        """
        self.events = self.rig.call_all({d: ("run", self.id) for d in self.workers})

    def outputs(self) -> Any:
        """The last step's outputs, numpy arrays (a pytree with out_tree)."""
        import jax

        wanted: dict[int, list[int]] = {}
        for out in self.flat_outputs:
            if not isinstance(out, Const):
                wanted.setdefault(out[0], []).append(out[1])
        got = self.rig.call_all({d: ("fetch", self.id, tuple(keys)) for d, keys in wanted.items()})
        values = {(d, k): x for d, keys in wanted.items() for k, x in zip(keys, got[d])}
        flat = [out.value if isinstance(out, Const) else values[out] for out in self.flat_outputs]
        if self.out_tree is None:
            return flat
        return jax.tree_util.tree_unflatten(self.out_tree, flat[:self.out_tree.num_leaves])

    def close(self) -> None:
        """Forgets the plan on its workers and unlinks its block.

        Drops the resident values only this plan held.
        """
        if self.closed or self.rig.closed:
            self.closed = True
            return
        self.closed = True
        self.rig.call_all({d: ("free", self.id) for d in self.workers})
        if any(self.owned.values()):
            self.rig.call_all({d: ("drop", tuple(keys)) for d, keys in self.owned.items() if keys})
        if self.block is not None:
            self.rig.release(self.block)


def to_rig(plan: Plan, rig: ProcessRig, scope: Any = None) -> RigPlan:
    """`plan` loaded on `rig`, one worker per device index.

    Args:
      plan: the plan to load.
      rig: its process rig, with as many workers as the plan has devices.
      scope: resident values sent under the same (hashable) scope are shared with other plans; None: this plan's
        own.

    Raises:
      InputError: the plan's device count is not the rig's.
    """
    if len(plan.devices) != rig.n_devices:
        raise InputError(f"the plan has {len(plan.devices)} devices, the process rig {rig.n_devices}")
    ids, avals, owned = _resident(plan, rig, scope)
    programs: list[list] = [[] for _ in range(rig.n_devices)]
    pending: list[dict[int, Recv]] = [{} for _ in range(rig.n_devices)]  # device -> batch -> Recv not yet placed
    batch_of: dict = {}  # (value, device) -> batch that brings it there
    loads: dict[int, dict[int, bytes]] = {}  # device -> stage id -> blob, not yet on that worker
    offset = 0
    for k, t in enumerate(plan.tasks):
        d = t.device
        if t.fn is not None:
            for s in t.inputs:
                recv = pending[d].pop(batch_of.get((s, d)), None)
                if recv is not None:
                    programs[d].append(recv)
            stage, outs = _stage(rig, t.fn, [avals[(s, d)] for s in t.inputs], d, loads)
            for s, aval in zip(t.outputs, outs):
                ids[(s, d)], avals[(s, d)] = rig.new_id(), aval
            programs[d].append(Run(stage, k, tuple(ids[(s, d)] for s in t.inputs),
                                   tuple(ids[(s, d)] for s in t.outputs), tuple(ids[(s, d)] for s in t.donated)))
        for dst, values in t.sends:
            slots = []
            for s in values:
                aval = avals[(s, d)]
                slots.append(Slot(ids[(s, d)], offset, tuple(aval.shape), np.dtype(aval.dtype).name))
                ids[(s, dst)], avals[(s, dst)], batch_of[(s, dst)] = rig.new_id(), aval, k
                offset += -(-max(1, aval.size * np.dtype(aval.dtype).itemsize) // ALIGN) * ALIGN
            programs[d].append(Send(dst, k, k, tuple(slots)))
            pending[dst][k] = Recv(d, k, tuple(s._replace(key=ids[(v, dst)]) for s, v in zip(slots, values)))
    for d in range(rig.n_devices):  # drain a batch nothing read (no plan of simulator.hardware.plans has one)
        programs[d].extend(pending[d].values())
    outputs = tuple(o if isinstance(o, Const) else (o[1], ids[o]) for o in plan.outputs)
    keep: list[list[int]] = [[] for _ in range(rig.n_devices)]
    for o in outputs:
        if not isinstance(o, Const):
            keep[o[0]].append(o[1])
    workers = tuple(d for d in range(rig.n_devices) if programs[d] or keep[d])
    if loads:
        rig.call_all({d: ("load", list(stages.items())) for d, stages in loads.items()})
        for d, stages in loads.items():
            rig.loaded[d].update(stages)
    block = rig.block(offset) if offset else None
    plan_id = rig.new_id()
    rig.call_all({d: ("plan", plan_id, tuple(programs[d]), block, tuple(keep[d])) for d in workers})
    rig_plan = RigPlan(rig, plan_id, workers, outputs, plan.out_tree, tuple(t.device for t in plan.tasks),
                       tuple(t.units or (t.unit,) for t in plan.tasks), block, owned, offset)
    rig_plan.n_stages = sum(isinstance(ins, Run) for program in programs for ins in program)
    return rig_plan


def _resident(plan: Plan, rig: ProcessRig, scope: Any) -> tuple[dict, dict, dict[int, list[int]]]:
    """Uploads the plan's resident values not yet there under `scope`.

    Returns:
      (value id per Key, aval per Key, value ids only this plan holds per device).
    """
    import jax

    ids, avals, owned = {}, {}, {d: [] for d in range(rig.n_devices)}
    uploads: dict[int, list] = {}
    for key, x in plan.resident.items():
        if isinstance(key[0], str):  # the plan's device tokens: a worker has its own
            continue
        s, d = key
        avals[key] = jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        shared = (scope, s, d) if scope is not None else None
        if shared is not None and shared in rig.resident:
            ids[key] = rig.resident[shared]
            continue
        ids[key] = rig.new_id()
        uploads.setdefault(d, []).append((ids[key], np.asarray(x)))
        if shared is not None:
            rig.resident[shared] = ids[key]
        else:
            owned[d].append(ids[key])
    if uploads:
        rig.call_all({d: ("put", items) for d, items in uploads.items()})
    return ids, avals, owned


def _stage(rig: ProcessRig, fn: Any, in_avals: Sequence[Any], device: int,
           loads: dict[int, dict[int, bytes]]) -> tuple[int, list]:
    """Exports `fn` for worker `device` once: (stage id, output avals).

    `fn` is exported with jax.export once per input shapes (cached on the rig); its blob is added to
    `loads[device]` unless that worker has it.
    """
    import warnings

    import jax
    import jax.numpy as jnp

    exports = rig.__dict__.setdefault("exports", {})  # (fn, shapes) -> (stage id, blob, output avals)
    key = (fn, tuple((tuple(a.shape), np.dtype(a.dtype).name) for a in in_avals))
    if key not in exports:
        with warnings.catch_warnings():  # a donated input no output can reuse: still freed early (dispatch.py)
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable", category=UserWarning)
            exported = jax.export.export(fn)(jax.ShapeDtypeStruct((), jnp.int8), *in_avals)
        outs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.out_avals[1:]]
        exports[key] = (rig.new_id(), bytes(exported.serialize()), outs)
    stage, blob, outs = exports[key]
    if stage not in rig.loaded[device]:
        loads.setdefault(device, {})[stage] = blob
    return stage, outs
