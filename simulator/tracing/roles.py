"""The role of each leaf of a training step's example arguments.

Which leaves are parameters, optimizer slots, other training state or data, found from the pytree structure (or
from paths the user names), and where the step returns their new values.

Roles of the array leaves (non-array leaves -- Python numbers, functions, strings -- are static, as
`equinox.filter_jit` treats them, and get no node):
  * "param": a parameter; its colocation group is its own path (`keystr`, e.g. `[0].params['Dense_0']['kernel']`);
  * "slot": optimizer state of one parameter (Adam's mu and nu, a momentum trace): joins its parameter's group;
  * "state": other training state (a step counter, batch statistics, an optimizer's count): its own group;
  * "input": data (the batch, a random key): no group, not persistent.

Where the parameters and the optimizer state are, the first rule that applies:
  1. named: `params` / `opt_state`, key paths within the argument tuple as `keystr` prints them ("[0].params",
     "[1]", "[0]['params']"): `placeto import-jax --params PATH --opt-state PATH`;
  2. flax nnx: leaves of `nnx.Param` variables are parameters, those of optimizer variables (`nnx.OptState` and
     subclasses) optimizer state, those of other variables (batch statistics, RNG counts, metrics) state;
  3. a node with children named `params` and `opt_state` (flax `TrainState` and subclasses, or a dict): those;
  4. optax state (nodes of optax's classes, e.g. `ScaleByAdamState`): the optimizer state is the smallest subtree
     holding them in the first argument that has any; the parameters are the smallest subtree holding every leaf
     its slots mirror (`step({"params": p, "batch_stats": s}, opt_state, batch)`: `[0]['params']`). Equinox
     modules are plain pytrees here;
  5. flat lists of arrays (keras' stateless `trainable_variables` / `optimizer_variables`): list A and list B that
     holds A's shapes in order as a contiguous run: A the parameters, B the optimizer state;
  6. the convention: argument 0 holds the parameters, argument 1 (if any) the optimizer state.
Every top-level argument holding parameters or optimizer state is persistent, its other array leaves state, and so
is any other argument the step returns with the same key names and shapes (carried state, e.g. keras'
non-trainable variables).

Slots: an optimizer leaf belongs to the parameter whose path shares the longest suffix of key names with its own
(`.opt_state[0].mu['Dense_0']['kernel']` -> `.params['Dense_0']['kernel']`), if that parameter is the only one
sharing it, the leaf is no larger than the parameter (factored statistics are smaller), and the shared suffix holds
a real name, not only list indices (or else the optimizer subtree mirrors the parameters' structure exactly).
Leftover leaves of a flat list are aligned by position against the parameters' shape sequence (keras keeps a list
per slot kind: all momentums, then all velocities). The rest (counts, hyperparameters) is state.

New values: each persistent argument maps, leaf by leaf, to the part of the result with the same key names and
shapes, else to its own leaves updated in place (flax nnx mutates its variables).
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple, Sequence

import jax
from jax.tree_util import DictKey, FlattenedIndexKey, SequenceKey, keystr

from simulator.model.errors import InputError

KINDS = ("param", "slot", "state", "input", "static")


class Roles(NamedTuple):
    """Roles of the L flat leaves of the example-argument tuple.

    In `jax.tree.flatten` order.
    """

    kind: tuple[str, ...]  # [L] one of KINDS
    group: tuple[str | None, ...]  # [L] colocation group (params: own path; slots: their param's; state: own path)
    new_value: tuple[int, ...]  # [L] index into the step's flat outputs of the leaf's new value, -1 if none
    persistent_args: tuple[int, ...]  # top-level arguments holding parameters, optimizer or carried state
    how: str  # which rule found the parameters and optimizer state (for the import report)
    params_path: str | None  # keystr of the parameters' subtree, when there is one
    opt_path: str | None  # keystr of the optimizer state's subtree, when there is one
    opt_unmatched: tuple[str, ...] = ()  # optimizer leaves no parameter claims (counts, hyperparameters): state

    def count(self, kind: str) -> int:
        return sum(k == kind for k in self.kind)


class _Node(NamedTuple):
    path: tuple  # jax key path from the argument tuple
    obj: Any
    lo: int  # flat leaves [lo, hi) lie under this node
    hi: int


def is_array(x: Any) -> bool:
    """Whether `x` is an array leaf (traced), not a static one.

    jax and numpy arrays, and jax.ShapeDtypeStruct.
    """
    import numpy as np

    return isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def key_name(k: Any) -> str:
    """The name of one path entry: ['a'] and .a are "a", [3] is "3"."""
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _is_index(k: Any) -> bool:
    return isinstance(k, (SequenceKey, FlattenedIndexKey)) or (isinstance(k, DictKey) and isinstance(k.key, int))


def walk(tree: Any) -> tuple[list[_Node], list[tuple[tuple, Any]]]:
    """Every node of `tree` (pre-order), and its leaves with key paths.

    Nodes internal and leaf; the leaves in flatten order.
    """
    nodes: list[_Node] = []
    leaves: list[tuple[tuple, Any]] = []

    def visit(obj: Any, path: tuple) -> None:
        kids, _ = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda y: y is not obj)
        k = len(nodes)
        nodes.append(_Node(path, obj, len(leaves), -1))
        if len(kids) == 1 and kids[0][0] == () and kids[0][1] is obj:
            leaves.append((path, obj))
        else:
            for p, child in kids:
                visit(child, path + p)
        nodes[k] = nodes[k]._replace(hi=len(leaves))

    visit(tree, ())
    return nodes, leaves


def _mro_names(obj: Any) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def parse_path(text: str, nodes: Sequence[_Node], flag: str) -> _Node:
    """The node whose keystr path is `text`, quotes and spaces normalised.

    Raises:
      InputError: naming `flag` and listing some paths, if there is none.
    """
    want = re.sub(r"\s+", "", text.replace('"', "'"))
    for n in nodes:
        if n.path and keystr(n.path) == want:
            return n
    shallow = [keystr(n.path) for n in nodes if 0 < len(n.path) <= 2][:12]
    raise InputError(f"{flag} {text[:80]!r}: no such path in the example arguments (some paths: "
                     f"{', '.join(shallow)})")


class _Tree:
    """The argument tuple walked once, its leaves' names and shapes.

    Nodes, leaves, key names, shapes and subtree signatures.
    """

    def __init__(self, args: tuple):
        self.nodes, path_leaves = walk(tuple(args))
        self.paths = [p for p, _ in path_leaves]
        self.values = [x for _, x in path_leaves]
        self.names = [tuple(key_name(k) for k in p) for p in self.paths]
        self.array = [is_array(x) for x in self.values]
        self.shapes = [tuple(getattr(x, "shape", ())) for x in self.values]
        self._sig: dict[tuple, tuple] = {}
        self.by_path = {n.path: n for n in self.nodes}
        self.kids: dict[tuple, list[_Node]] = {}
        for n in self.nodes[1:]:
            self.kids.setdefault(n.path[:-1], []).append(n)

    def under(self, node: _Node) -> range:
        return range(node.lo, node.hi)

    def signature(self, node: _Node) -> tuple:
        """(key names below the node, shape) of each of its array leaves.

        Equal for a tree and its optax mirror.
        """
        key = id(node.obj), node.lo, node.hi
        if key not in self._sig:
            d = len(node.path)
            self._sig[key] = tuple((self.names[i][d:], self.shapes[i]) for i in self.under(node) if self.array[i])
        return self._sig[key]

    def node_at(self, path: tuple) -> _Node | None:
        return self.by_path.get(tuple(path))

    def arg_of(self, i: int) -> int:
        return self.paths[i][0].idx


def _lca(paths: Sequence[tuple]) -> tuple:
    if not paths:
        return ()
    first = paths[0]
    n = min(len(p) for p in paths)
    k = 0
    while k < n and all(p[k] == first[k] for p in paths):
        k += 1
    return first[:k]


def _size(shape: tuple) -> int:
    return math.prod(shape) if shape else 1


# ---- where the parameters and the optimizer state are ---------------------------------------------------------
class _Found(NamedTuple):
    params: list[int]  # flat leaf indices
    opt: list[int]
    state: list[int]  # known state (nnx variables, TrainState fields)
    params_node: _Node | None
    opt_node: _Node | None
    how: str


def _nnx(t: _Tree) -> _Found | None:
    kinds: dict[int, str] = {}
    for n in t.nodes:  # pre-order: the innermost variable decides, and it comes last
        names = _mro_names(n.obj)
        if "Variable" in names and type(n.obj).__module__.startswith("flax.nnx"):
            kind = "param" if "Param" in names else "opt" if "OptState" in names else "state"
            for i in t.under(n):
                if t.array[i]:
                    kinds[i] = kind
    if not any(k == "param" for k in kinds.values()):
        return None
    pick = lambda kind: [i for i, k in sorted(kinds.items()) if k == kind]  # noqa: E731
    return _Found(pick("param"), pick("opt"), pick("state"), None, None, "flax nnx variables")


def _named_pair(t: _Tree) -> _Found | None:
    for n in t.nodes:
        kids = {key_name(c.path[-1]): c for c in t.kids.get(n.path, ())}
        if "params" in kids and "opt_state" in kids:
            p, o = kids["params"], kids["opt_state"]
            state = [i for i in t.under(n) if t.array[i] and not (p.lo <= i < p.hi or o.lo <= i < o.hi)]
            return _Found(_arrays(t, p), _arrays(t, o), state, p, o,
                          f"{type(n.obj).__name__} at {keystr(n.path)} (.params, .opt_state)")
    return None


def _arrays(t: _Tree, node: _Node, exclude: _Node | None = None) -> list[int]:
    return [i for i in t.under(node) if t.array[i] and not (exclude and exclude.lo <= i < exclude.hi)]


def _optax_node(t: _Tree) -> _Node | None:
    hits = [n for n in t.nodes if n.path and type(n.obj).__module__.split(".")[0] == "optax"]
    if not hits:
        return None
    arg = hits[0].path[0]
    return t.node_at(_lca([n.path for n in hits if n.path[0] == arg]))


def _params_mirrored_by(t: _Tree, opt: _Node) -> _Node | None:
    """Smallest subtree outside `opt` holding every leaf its slots match."""
    outside = [i for i in range(len(t.values)) if t.array[i] and not opt.lo <= i < opt.hi]
    matched = set(match_slots(t, outside, _arrays(t, opt), None).values())
    if not matched:
        return None
    root = _lca([t.paths[i] for i in sorted(matched)])
    return t.node_at(root) if root else None


def _runs(shapes: Sequence[tuple], seq: Sequence[tuple], max_stride: int = 4) -> list[list[int]]:
    """Disjoint runs of positions in `shapes` that hold `seq` in order.

    Contiguous (stride 1) or interleaved with other runs (stride 2..max_stride: keras 3 keeps an optimizer's
    momentum and velocity of one variable side by side); the stride that gives the most runs (then the smallest),
    runs taken from the left.
    """
    k = len(seq)
    best: list[list[int]] = []
    for stride in range(1, max_stride + 1):
        taken, runs = set(), []
        for start in range(len(shapes) - (k - 1) * stride):
            pos = [start + i * stride for i in range(k)]
            if not taken.intersection(pos) and all(shapes[p] == seq[i] for i, p in enumerate(pos)):
                runs.append(pos)
                taken.update(pos)
        if len(runs) > len(best):
            best = runs
    return best


def _flat_lists(t: _Tree) -> _Found | None:
    lists = [n for n in t.nodes if n.path and n.hi - n.lo >= 2 and isinstance(n.obj, (list, tuple))
             and all(len(t.paths[i]) == len(n.path) + 1 and t.array[i] for i in t.under(n))]
    best = None
    for a in lists:
        seq = [t.shapes[i] for i in t.under(a)]
        if len(set(seq)) < 2:
            continue  # one repeated shape proves nothing
        for b in lists:
            if b is a or b.lo < a.hi and a.lo < b.hi or b.hi - b.lo < a.hi - a.lo:
                continue
            if _runs([t.shapes[i] for i in t.under(b)], seq) and (best is None or a.hi - a.lo > best[0].hi -
            best[0].lo):
                best = (a, b)
    if best is None:
        return None
    a, b = best
    return _Found(_arrays(t, a), _arrays(t, b), [], a, b, f"flat lists: parameters {keystr(a.path)}, "
                                                          f"optimizer state {keystr(b.path)} (aligned by shape)")


def find(t: _Tree, params: str | None = None, opt_state: str | None = None) -> _Found:
    """The parameters and optimizer state (rules 1-6 of the module doc).

    Raises:
      InputError: for a named path that does not exist, or named paths that overlap.
    """
    if params is not None or opt_state is not None:
        p = parse_path(params, t.nodes, "--params") if params is not None else None
        o = parse_path(opt_state, t.nodes, "--opt-state") if opt_state is not None else None
        if p is not None and o is not None and (p.lo < o.hi and o.lo < p.hi):
            raise InputError(f"--params {params} and --opt-state {opt_state} overlap")
        if o is None:
            o = _optax_node(t)
            o = o if o is not None and not (p.lo < o.hi and o.lo < p.hi) else None
        if p is None:
            p = _params_mirrored_by(t, o)
        return _Found(_arrays(t, p, o) if p else [], _arrays(t, o) if o else [], [], p, o, "named paths")
    for rule in (_nnx, _named_pair):
        found = rule(t)
        if found is not None:
            return found
    o = _optax_node(t)
    if o is not None:
        p = _params_mirrored_by(t, o)
        if p is None:  # no slot mirrors a leaf (plain SGD): the first other argument
            p = next((n for n in t.nodes if len(n.path) == 1 and n.path != o.path[:1]), None)
        return _Found(_arrays(t, p, o) if p else [], _arrays(t, o), [], p, o, f"optax state at {keystr(o.path)}")
    found = _flat_lists(t)
    if found is not None:
        return found
    args = [n for n in t.nodes if len(n.path) == 1]
    p, o = (args + [None, None])[:2]
    return _Found(_arrays(t, p) if p else [], _arrays(t, o) if o else [], [], p, o,
                  "convention: argument 0 = parameters, argument 1 = optimizer state")


# ---- slots -------------------------------------------------------------------------------------------------
def match_slots(t: _Tree, params: Sequence[int], opt: Sequence[int], params_node: _Node | None) -> dict[int, int]:
    """{optimizer leaf: parameter leaf}, by shared key-name suffixes.

    The longest unique shared suffix of key names (see the module doc).
    """
    if not params:
        return {}
    index: dict[tuple, list[int]] = {}
    for p in params:
        for k in range(1, len(t.names[p]) + 1):
            index.setdefault(t.names[p][-k:], []).append(p)
    last = {t.names[p][-1] for p in params if t.names[p]}
    uninformative = last if len(last) == 1 and len(params) > 1 else set()  # nnx's ".value" on every leaf
    out = {}
    for s in opt:
        names = t.names[s]
        for k in range(len(names), 0, -1):
            cands = [p for p in index.get(names[-k:], ()) if _fits(t.shapes[s], t.shapes[p])]
            if not cands:
                continue
            if len(cands) > 1:  # e.g. per-layer optimizer states: `[1]['l1'][0].mu['w']` -> `[0]['l1']['w']`
                score = {p: _backwards_match(t.names[p], names) for p in cands}
                top = max(score.values())
                cands = [p for p in cands if score[p] == top]
            if len(cands) > 1:
                same = [p for p in cands if t.shapes[p] == t.shapes[s]]
                cands = same if len(same) == 1 else []
            if cands and _informative(t, s, k, uninformative, params_node):
                out[s] = cands[0]
            break
    return out


def _backwards_match(short: tuple, long: tuple) -> int:
    """How many of `short`'s last names appear in order in `long`.

    Counted from the end of `short`, as a subsequence of `long`.
    """
    j, k = len(long) - 1, 0
    for name in reversed(short):
        while j >= 0 and long[j] != name:
            j -= 1
        if j < 0:
            break
        k, j = k + 1, j - 1
    return k


def _fits(slot: tuple, param: tuple) -> bool:
    return slot == param or (len(slot) <= len(param) and _size(slot) <= _size(param) and len(slot) > 0)


def _informative(t: _Tree, s: int, k: int, uninformative: set, params_node: _Node | None) -> bool:
    keys = t.paths[s][-k:]
    if any(not _is_index(key) and key_name(key) not in uninformative for key in keys):
        return True
    if params_node is None:
        return False
    mirror = t.node_at(t.paths[s][:-k])  # only list indices shared: the optimizer's list must mirror the params
    return mirror is not None and t.signature(mirror) == t.signature(params_node)


def align_lists(t: _Tree, params_node: _Node | None, leftovers: Sequence[int]) -> dict[int, int]:
    """{optimizer leaf: parameter leaf} for leftover flat-list leaves.

    Runs of the parameters' shape sequence.
    """
    if params_node is None or not isinstance(params_node.obj, (list, tuple)):
        return {}
    params = _arrays(t, params_node)
    seq = [t.shapes[p] for p in params]
    if len(params) < 2 or len(set(seq)) < 2:
        return {}
    left = sorted(leftovers)
    out = {}
    for run in _runs([t.shapes[i] for i in left], seq):
        out.update((left[j], p) for j, p in zip(run, params))
    return out


# ---- new values --------------------------------------------------------------------------------------------
def new_values(t: _Tree, roots: Sequence[_Node], out_names: Sequence[tuple], out_shapes: Sequence[tuple],
               updated: dict[int, int]) -> dict[int, int]:
    """{input leaf: output index}: the new value of each leaf of `roots`.

    For the array leaves of `roots`: the first unused part of the outputs with the same key names and shapes
    (out_names/out_shapes: [O] per output leaf; prefixes of its names are its parts), else the in-place update
    `updated` ({input leaf: output index}).
    """
    parts: dict[tuple, list[tuple]] = {}  # signature -> prefixes (in output order)
    prefixes: dict[tuple, list[int]] = {}
    for o, names in enumerate(out_names):
        for d in range(len(names) + 1):
            prefixes.setdefault(names[:d], []).append(o)
    for prefix, outs in prefixes.items():
        sig = tuple((out_names[o][len(prefix):], out_shapes[o]) for o in outs)
        parts.setdefault(sig, []).append(prefix)
    used: set[tuple] = set()
    out: dict[int, int] = {}
    for root in roots:
        sig = t.signature(root)
        same = [p for p in parts.get(sig, []) if p not in used] if sig else []
        own = tuple(key_name(k) for k in root.path)  # the result mirrors the arguments: prefer the same place
        prefix = own if own in same else next(iter(same), None)
        if prefix is None:
            continue
        used.add(prefix)
        outs = iter(prefixes[prefix])
        for i in t.under(root):
            if t.array[i]:
                out[i] = next(outs)
    for i, o in updated.items():
        out.setdefault(i, o)
    return out


def assign(args: tuple, out_names: Sequence[tuple], out_shapes: Sequence[tuple], updated: dict[int, int],
           params: str | None = None, opt_state: str | None = None,
           persistent_argnums: Sequence[int] | None = None) -> Roles:
    """Roles of every flat leaf of `args` (see the module doc).

    out_names/out_shapes: [O] key names and shapes of the step's array outputs; updated: {input leaf: output
    index} of leaves the step updated in place. persistent_argnums (legacy): these arguments are persistent,
    the first one the parameters, the others optimizer state.

    Raises:
      InputError: for a named path (`params`, `opt_state`) that does not exist, or named paths that overlap.
    """
    t = _Tree(args)
    if persistent_argnums is not None:
        argn = [n for n in t.nodes if len(n.path) == 1]
        p = argn[persistent_argnums[0]] if persistent_argnums else None
        opt_nodes = [argn[k] for k in persistent_argnums[1:]]
        f = _Found(_arrays(t, p) if p else [], [i for n in opt_nodes for i in _arrays(t, n)], [], p,
                   opt_nodes[0] if len(opt_nodes) == 1 else None, f"arguments {list(persistent_argnums)}")
    else:
        f = find(t, params, opt_state)
    slots = match_slots(t, f.params, [i for i in f.opt if i not in f.params], f.params_node)
    slots.update(align_lists(t, f.params_node, [i for i in f.opt if i not in slots]))
    roots = [n for n in t.nodes if len(n.path) == 1]
    held = {t.arg_of(i) for i in (*f.params, *f.opt, *f.state)}
    if persistent_argnums is not None:
        held = set(persistent_argnums)
    outs = new_values(t, [r for r in roots if r.path[0].idx in held], out_names, out_shapes, updated)
    if persistent_argnums is None:  # carried state: another argument the step returns
        carried = new_values(t, [r for r in roots if r.path[0].idx not in held], out_names, out_shapes, updated)
        carried = {i: o for i, o in carried.items() if o not in outs.values()}
        held |= {t.arg_of(i) for i in carried}
        outs.update(carried)
    params_set = set(f.params)
    kind, group = [], []
    for i, path in enumerate(t.paths):
        if not t.array[i]:
            kind.append("static")
            group.append(None)
        elif i in params_set:
            kind.append("param")
            group.append(keystr(path))
        elif i in slots:
            kind.append("slot")
            group.append(keystr(t.paths[slots[i]]))
        elif t.arg_of(i) in held:
            kind.append("state")
            group.append(keystr(path))
        else:
            kind.append("input")
            group.append(None)
    return Roles(tuple(kind), tuple(group), tuple(outs.get(i, -1) for i in range(len(t.paths))),
                 tuple(sorted(held)), f.how, keystr(f.params_node.path) if f.params_node else None,
                 keystr(f.opt_node.path) if f.opt_node else None,
                 tuple(keystr(t.paths[i]) for i in f.opt if i not in slots and i not in params_set))
