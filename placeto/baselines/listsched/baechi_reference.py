"""Baechi's m-ETF and m-SCT event loops in plain Python: an oracle.

From github.com/beomyeol/baechi (placer/m_etf.py and placer/m_sct.py), over `problem.State`'s transfer and memory
model. Written from Baechi's structure, not from our kernel's, so that the two agree only if our reading is right:

* A clock visits event times. At each, every device advances: a free device's clock moves to now, and an op
  whose end has come releases its children; a child enters the ready list when all its parents have ended.
* Each ready op has a schedule time per device whose memory it fits: max(estimated input-ready, device free).
  The input-ready estimates are cached and forgotten, as Baechi's ReadyOpManager does, when a placement books
  a channel they used (that device, or one sending to it).
* Each free device picks, of the ready ops that suit it, the one with the earliest (schedule time, topological
  position) if that time has come; of the devices' picks, the earliest (time, position) wins, ties to the lower
  device. Repeat at the same time until no device picks, then move the clock to the next event: a busy device's
  free time, a free device's earliest schedule time (of any op), or (our addition, for delta1) an op's end.
* An op suits a device if it finishes first there of the devices it fits (`problem.earliest_finish`; our
  addition, for mixed devices). On identical devices that is where it starts first, and Baechi's picks are
  unchanged: an op whose time has come on a free device starts there no later than anywhere.
* m-SCT changes one thing: a free device whose last op has a ready favourite child that suits it waits for it
  ("awake"), unless some op that suits it is urgent (its schedule time on every device it fits has come).

Differences from Baechi, none of which arise on graphs whose ops all take time and fit in memory: children of
a zero-cost op are released at once (Baechi forces costs >= 1 us); when no ready op fits in memory anywhere,
instead of stopping with an error, it places the best-memory-tier pair that starts first, at the earliest when
every device is idle (`problem.etf_reference` does the same, so the two stay equal).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from placeto.baselines.listsched.problem import Schedule, ScheduleProblem, State, earliest_finish


class _Loop:
    """One run of the event loop: m-ETF, or m-SCT with favourites.

    favourite: int[N] each node's favourite child (-1: none); None: m-ETF.
    """

    def __init__(self, prob: ScheduleProblem, favourite: np.ndarray | None):
        self.prob, self.st = prob, State(prob)
        self.n_dev = prob.cost.shape[1]
        self.fav = None if favourite is None else favourite.tolist()
        self.topo = prob.topo_pos.tolist()
        self.waiting = np.diff(prob.par_off).tolist()  # parents not ended yet
        self.ready = [v for v in range(prob.cost.shape[0]) if self.waiting[v] == 0]
        self.releases: list[tuple[float, int]] = []  # (end, op) of placed ops whose children wait for the end
        self.last_op = [-1] * self.n_dev
        self.awake = [False] * self.n_dev
        self.est: dict[tuple[int, int], tuple[float, set[int]]] = {}  # Baechi's cached ready_tss + senders
        self.tss: dict[int, dict[int, float]] = {}  # schedule times of the ready ops on their fitting devices
        self.now, self.placed = 0.0, 0

    def run(self) -> Schedule:
        n = self.prob.cost.shape[0]
        while self.placed < n:
            self._advance()
            while (pick := self._pick()) is not None:
                self._place(*pick)
            if self.placed == n:
                break
            nxt = self._next_time()
            if nxt is None:
                self._place_without_memory()
            else:
                self.now = nxt
        return self.st.schedule()

    # ---- time -----------------------------------------------------------------------------------------------
    def _advance(self) -> None:
        for d in range(self.n_dev):
            self.st.avail[d] = max(self.st.avail[d], self.now)
        self._release()

    def _release(self) -> None:
        while self.releases and self.releases[0][0] <= self.now:
            _, v = heapq.heappop(self.releases)
            for c in self.prob.ch[self.prob.ch_off[v]:self.prob.ch_off[v + 1]].tolist():
                self.waiting[c] -= 1
                if self.waiting[c] == 0:
                    self.ready.append(c)

    def _next_time(self) -> float | None:
        times = [e for e, _ in self.releases if e > self.now]
        for d in range(self.n_dev):
            if self.st.avail[d] > self.now:  # busy
                times.append(self.st.avail[d])
            elif self.awake[d]:
                fc = self.fav[self.last_op[d]]
                if d in self.tss.get(fc, {}):
                    times.append(self.tss[fc][d])
                if (u := self._most_urgent(d)) is not None and self._urgent_time(u) > self.now:
                    times.append(self._urgent_time(u))  # (one that has come waits for a device it suits)
            else:  # any op's schedule time on d, not only of the ops that suit d: on identical devices the same
                times += [min([t[d] for t in self.tss.values() if d in t and t[d] > self.now], default=math.inf)]
        times = [t for t in times if t < math.inf]
        assert all(t > self.now for t in times)  # Baechi: "Timestamp should move forward"
        return min(times) if times else None

    # ---- choosing -------------------------------------------------------------------------------------------
    def _estimate(self, v: int, d: int) -> float:
        if (v, d) not in self.est:
            self.est[(v, d)] = self.st.ready_time(v, d)
        return self.est[(v, d)][0]

    def _populate(self) -> None:
        self.tss = {v: {d: max(self._estimate(v, d), self.st.avail[d])
                        for d in range(self.n_dev) if self.st.tier(v, d) == 0} for v in self.ready}

    def _suits(self, v: int, d: int) -> bool:
        """Whether v finishes first on d of the devices it fits (`problem.earliest_finish`)."""
        return d in earliest_finish(self.prob, v, self.tss[v])

    def _earliest(self, d: int) -> int | None:
        keys = [(t[d], self.topo[v], v) for v, t in self.tss.items() if d in t and self._suits(v, d)]
        return min(keys)[2] if keys else None

    def _urgent_time(self, v: int) -> float:
        return max(self.tss[v].values())  # when v can start on every device it fits

    def _most_urgent(self, d: int) -> int | None:
        keys = [(self._urgent_time(v), self.topo[v], v) for v, t in self.tss.items() if d in t]
        return min(keys)[2] if keys else None

    def _device_pick(self, d: int) -> int | None:
        """What free device d would run now (Baechi's get_op_to_schedule)."""
        self.awake[d] = False
        if self.st.avail[d] > self.now:
            return None
        last = self.last_op[d]
        fc = self.fav[last] if self.fav is not None and last >= 0 else -1
        if fc >= 0 and d in self.tss.get(fc, {}) and self._suits(fc, d):
            self.awake[d] = True  # wait for the favourite child unless something is urgent
            u = self._most_urgent(d)
            if u is not None and self._urgent_time(u) <= self.now and self._suits(u, d):
                return u
            return fc if self.tss[fc][d] <= self.now else None
        v = self._earliest(d)
        return v if v is not None and self.tss[v][d] <= self.now else None

    def _pick(self) -> tuple[int, int] | None:
        self._populate()
        best = None
        for d in range(self.n_dev):
            v = self._device_pick(d)
            if v is not None and (best is None or (self.tss[v][d], self.topo[v]) < best[:2]):
                best = (self.tss[v][d], self.topo[v], v, d)
        return None if best is None else (best[2], best[3])

    def _place_without_memory(self) -> None:
        """Place the earliest best-tier pair: nothing fits, nothing runs."""
        tiers = {(v, d): self.st.tier(v, d) for v in self.ready for d in range(self.n_dev)}
        low = min(tiers.values())
        pairs = []
        for v in self.ready:
            starts = {d: max(self._estimate(v, d), self.st.avail[d], self.now) for d in range(self.n_dev)
                      if tiers[v, d] == low}
            pairs += [(starts[d], self.topo[v], d, v) for d in earliest_finish(self.prob, v, starts)]
        s, _, d, v = min(pairs)
        self.now = s
        self._place(v, d)

    # ---- placing --------------------------------------------------------------------------------------------
    def _place(self, v: int, d: int) -> None:
        self.st.commit(v, d, self.now)
        self.last_op[d] = v
        self.placed += 1
        self.ready.remove(v)
        self.tss.pop(v, None)
        for e in range(self.n_dev):
            self.est.pop((v, e), None)
        changed = self.st.senders | {d}
        for key in [k for k, (_, senders) in self.est.items() if senders and (k[1] in changed or senders & changed)]:
            del self.est[key]
        heapq.heappush(self.releases, (self.st.end[v], v))
        self._release()  # a zero-cost op's children are ready at once


def baechi_etf(prob: ScheduleProblem) -> Schedule:
    """Baechi's m-ETF event loop, equal to `etf_reference` and `etf`."""
    return _Loop(prob, None).run()


def baechi_sct(prob: ScheduleProblem, favourite: np.ndarray) -> Schedule:
    """Baechi's m-SCT event loop.

    favourite: int[N] the child each node's device waits for (-1: none).
    """
    return _Loop(prob, np.asarray(favourite)).run()
