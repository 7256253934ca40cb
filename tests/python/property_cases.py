"""Random sequences of collectives for test_property_collectives.py: what to draw and what to expect.

A *case* is a list of waves; a wave is a list of steps that every rank
submits (in an order that may differ between ranks where that is allowed)
and then waits for (in an order of each rank's own). A step is one
collective call described by plain data (str, int, float, list, dict), so a
case prints as JSON and replays from it:

    {"api": ["numpy", "torch"],   # per rank of the step's process set
     "kind": "allreduce", "grouped": false, "in_place": false, "form": "async", "strided": false,
     "set": 0, "name": "p.a" or null, "op": "Sum", "prescale": 1.0, "postscale": 1.0,
     "root": 0,                   # broadcast: a global rank
     "members": [{"dtype": "float32", "shape": [3, 4],
                  "rows": [..],     # allgather, alltoall: dim 0 per rank of the set
                  "splits": [[..]]  # alltoall: per rank of the set, or null (even)
                  }],
     "fault": null or {"what": "shape", "ranks": [set indices], "member": 0},
     "refuse": null or {"what": "splits_sum", "ranks": [global ranks]}}

* A ``fault`` makes the ranks disagree in a way only negotiation can see
  (shape, dtype, reduce op, scale factor, root rank, trailing dimensions, the
  collective itself, the number of members of a group): every rank of the
  set must get ``AccordError``.
* A ``refuse`` gives some ranks an invalid argument: those ranks must get
  ``ValueError`` at the call, and the set's other ranks skip the step (an
  argument refused on one rank alone must leave the others in step).

Strategies are built for a given world size; everything a rank needs to
know about every other rank (its inputs, its shape, its splits) is in the
case, so every rank computes the expected result of every step itself.
"""

import json
import zlib
from typing import List, Sequence

import numpy as np
from hypothesis import strategies as st

import accord

from conftest import rank_input, reference_reduce, tolerance

NUMPY_DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"]
ALL_DTYPES = NUMPY_DTYPES + ["bfloat16"]
OPS = {
    "Sum": accord.Sum,
    "Average": accord.Average,
    "Min": accord.Min,
    "Max": accord.Max,
    "Product": accord.Product,
}
REDUCESCATTER_OPS = ["Sum", "Average"]
SCALES = [1.0, 1.0, 1.0, 0.5, 2.0, -1.0, 0.75, 3.0, 0.1, 0.7]
NAMES = ["p.a", "p.b", "p.c", "p.d", "p.e", "p.f"]  # few, so names recur with other requests
DIMS = [0, 1, 1, 2, 3, 4, 5, 7, 9, 16, 33]
BIG_ROW = 40961  # a row of float32 this long makes tensors of ~1 MiB: past a staging window, never fused
KINDS = ["allreduce", "allreduce", "allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]
GROUPABLE = ("allreduce", "allgather", "reducescatter")
BAD_OP = 97  # no such reduce op


def set_layouts(size: int) -> List[List[int]]:
    """The global ranks of each process set a step can use; index 0 is the global set.

    The others are registered with ``accord.add_process_set`` in this order.
    """
    layouts = [list(range(size)), list(range(size)), [0], list(range(1, size))]
    if size > 2:
        layouts.append([0, size - 1])
    return layouts


def case_json(case) -> str:
    return json.dumps(case, sort_keys=True, separators=(",", ":"))


def case_digest(case) -> int:
    return zlib.crc32(case_json(case).encode())


# ------------------------------------------------------------------ drawing


def _subset(draw, items: Sequence[int], proper: bool) -> List[int]:
    """A non-empty subset of ``items`` (a proper one if ``proper``), sorted."""
    items = list(items)
    chosen = draw(
        st.lists(st.sampled_from(items), min_size=1, max_size=len(items) - (1 if proper else 0), unique=True)
    )
    return sorted(chosen)


def _dtype_ok(dtype: str, op: str, prescale: float, postscale: float) -> bool:
    if dtype == "bool":
        return op != "Average" and prescale == 1.0 and postscale == 1.0
    return True


@st.composite
def _member(draw, kind: str, n: int, dtype: str, big: bool):
    m = {"dtype": dtype}
    trailing = [BIG_ROW] if big else draw(st.lists(st.sampled_from(DIMS), max_size=2))
    if kind in ("allreduce", "broadcast"):
        if big:
            m["shape"] = [draw(st.integers(1, 2 * n + 1)), BIG_ROW]
        else:
            m["shape"] = draw(st.lists(st.sampled_from(DIMS), max_size=3))
    elif kind == "reducescatter":
        m["shape"] = [draw(st.integers(0, 2 * n + 1))] + trailing
    elif kind == "allgather":
        m["rows"] = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        m["shape"] = [None] + trailing
    else:  # alltoall
        if draw(st.integers(0, 3)) == 0:
            m["splits"] = None
            m["rows"] = [n * k for k in draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))]
        else:
            m["splits"] = draw(
                st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n), min_size=n, max_size=n)
            )
            m["rows"] = [sum(s) for s in m["splits"]]
        m["shape"] = [None] + trailing
    return m


FAULTS = {
    "allreduce": ["shape", "dtype", "op", "scale", "kind"],
    "reducescatter": ["shape", "dtype", "op", "scale", "kind"],
    "broadcast": ["shape", "dtype", "root", "kind"],
    "allgather": ["trailing", "dtype", "kind"],
    "alltoall": ["trailing", "dtype", "kind"],
}
REFUSALS = {
    "allreduce": ["bad_op", "bool_average", "bool_scale", "mixed_bool", "not_member"],
    "reducescatter": ["reducescatter_op", "scalar", "bad_op", "not_member"],
    "broadcast": ["root_outside", "not_member"],
    "allgather": ["scalar", "not_member"],
    "alltoall": ["splits_sum", "splits_len", "splits_negative", "no_splits_uneven", "scalar", "not_member"],
}


@st.composite
def steps(draw, size: int):
    layouts = set_layouts(size)
    set_index = draw(st.sampled_from([0, 0, 0] + list(range(1, len(layouts)))))
    ranks = layouts[set_index]
    n = len(ranks)
    kind = draw(st.sampled_from(KINDS))
    grouped = kind in GROUPABLE and draw(st.integers(0, 3)) == 0
    count = draw(st.integers(2, 4)) if grouped else 1
    step = {
        "kind": kind,
        "grouped": grouped,
        "set": set_index,
        "in_place": kind in ("allreduce", "broadcast") and draw(st.booleans()),
        "form": draw(st.sampled_from(["async", "async", "async", "sync", "poll"])),
        # torch tensors of 2 or more dims passed as transposed views (not contiguous)
        "strided": draw(st.integers(0, 3)) == 0,
        "name": draw(st.sampled_from(NAMES)) if draw(st.integers(0, 4)) < 3 else None,
        "op": "Sum",
        "prescale": 1.0,
        "postscale": 1.0,
        "root": 0,
        "fault": None,
        "refuse": None,
    }
    if kind in ("allreduce", "reducescatter"):
        step["op"] = draw(st.sampled_from(list(OPS) if kind == "allreduce" else REDUCESCATTER_OPS))
        if draw(st.booleans()):
            # Product's inputs are factors in {-1, 1, 2}: a prescale beyond 1
            # would overflow int8 inside the reduction (it wraps there).
            step["prescale"] = draw(st.sampled_from([1.0, -1.0] if step["op"] == "Product" else SCALES))
            step["postscale"] = draw(st.sampled_from(SCALES))
    if kind == "broadcast":
        step["root"] = draw(st.sampled_from(ranks))
    # Bool reductions take no Average and no scale factors, and a group
    # reduces bool members only together with other bool members.
    reduction = kind in ("allreduce", "reducescatter")
    bool_group = draw(st.integers(0, 5)) == 0 and (
        not reduction or _dtype_ok("bool", step["op"], step["prescale"], step["postscale"])
    )
    members = []
    for _ in range(count):
        if bool_group and (reduction or draw(st.booleans())):
            dtype = "bool"
        else:
            dtype = draw(st.sampled_from([d for d in ALL_DTYPES if d != "bool" or not reduction]))
        big = draw(st.integers(0, 29)) == 0
        members.append(draw(_member(kind, n, dtype, big)))
    step["members"] = members

    mode = draw(st.integers(0, 9))
    has_bool = any(m["dtype"] == "bool" for m in members)
    reduction = kind in ("allreduce", "reducescatter")
    if mode < 2 and n >= 2:
        what = draw(st.sampled_from(FAULTS[kind]))
        if what == "kind" and (step["name"] is None or grouped):
            what = "dtype"  # unnamed: another collective has another auto-name; grouped: other names
        if what == "scale" and has_bool:
            what = "dtype"  # scale factors are refused for bool at the call
        if what == "dtype" and reduction and has_bool and count > 1:
            what = "shape"  # a group may not mix bool with other dtypes: refused at the call
        if grouped and draw(st.integers(0, 2)) == 0:
            what = "members"  # the fault ranks give the group one member more, or one fewer
        member = draw(st.integers(0, count - 1))
        fault = {"what": what, "ranks": _subset(draw, range(n), proper=True), "member": member}
        if what == "dtype":
            dtype = members[member]["dtype"]
            bool_ok = not reduction or (
                count == 1 and _dtype_ok("bool", step["op"], step["prescale"], step["postscale"])
            )
            fault["dtype"] = draw(
                st.sampled_from([d for d in ALL_DTYPES if d != dtype and (d != "bool" or bool_ok)])
            )
        elif what == "op":
            ops = list(OPS) if kind == "allreduce" else REDUCESCATTER_OPS
            ops = [
                o
                for o in ops
                if o != step["op"]
                and all(_dtype_ok(m["dtype"], o, step["prescale"], step["postscale"]) for m in members)
            ]
            if ops:
                fault["op"] = draw(st.sampled_from(ops))
            else:
                fault["what"] = "shape"
        elif what == "root":
            fault["root"] = draw(st.sampled_from([r for r in ranks if r != step["root"]]))
        elif what == "members":
            fault["extra"] = draw(st.booleans())
        step["fault"] = fault
    elif mode == 2:
        what = draw(st.sampled_from(REFUSALS[kind]))
        outsiders = [r for r in range(size) if r not in ranks]
        if what == "not_member" and not outsiders:
            what = {
                "allreduce": "bad_op",
                "reducescatter": "reducescatter_op",
                "broadcast": "root_outside",
                "allgather": "scalar",
                "alltoall": "splits_sum",
            }[kind]
        if what == "mixed_bool" and count < 2:
            what = "bool_average"
        if what == "no_splits_uneven" and n < 2:
            what = "splits_len"
        step["refuse"] = {
            "what": what,
            "ranks": _subset(draw, outsiders if what == "not_member" else ranks, proper=False),
        }
    # Which API each rank of the set calls: bfloat16 exists in torch only.
    uses_bf16 = (
        any(m["dtype"] == "bfloat16" for m in members) or (step["fault"] or {}).get("dtype") == "bfloat16"
    )
    if uses_bf16:
        step["api"] = ["torch"] * size
    else:
        step["api"] = draw(st.lists(st.sampled_from(["numpy", "torch"]), min_size=size, max_size=size))
    return step


@st.composite
def waves(draw, size: int):
    if draw(st.integers(0, 14)) == 0:
        # A process set added, used and removed again on every rank.
        return {
            "type": "process_set",
            "ranks": _subset(draw, range(size), proper=False),
            "name": draw(st.sampled_from(NAMES + [None])),
            "api": draw(st.lists(st.sampled_from(["numpy", "torch"]), min_size=size, max_size=size)),
        }
    if draw(st.integers(0, 9)) == 0:
        layouts = set_layouts(size)
        sets = [i for i, r in enumerate(layouts) if len(r) >= 2]
        return {
            "type": "in_flight",
            "set": draw(st.sampled_from(sets)),
            "name": draw(st.sampled_from(NAMES)),
            "retry_kind": draw(st.sampled_from(["allreduce", "allgather"])),
            "api": draw(st.lists(st.sampled_from(["numpy", "torch"]), min_size=size, max_size=size)),
        }
    items = draw(st.lists(steps(size), min_size=1, max_size=5))
    seen = set()
    for i, s in enumerate(items):  # names are unique within a wave (all of it is in flight at once)
        if s["name"] is not None:
            if s["name"] in seen:
                s["name"] = f"{s['name']}/{i}"  # not ".i": the name of a group's member
            seen.add(s["name"])
    k = len(items)
    order = draw(st.permutations(range(k)))
    # Each rank may submit the async named steps in its own order: positions
    # of those steps in the common order are shuffled per rank. Unnamed and
    # blocking steps keep their places (unnamed ones match by order; a
    # blocking call waits for the others).
    movable = [p for p, i in enumerate(order) if items[i]["form"] != "sync" and items[i]["name"] is not None]
    per_rank = []
    for _ in range(size):
        shuffled = draw(st.permutations(movable))
        mine = list(order)
        for p, q in zip(movable, shuffled):
            mine[p] = order[q]
        per_rank.append(mine)
    waits = [draw(st.permutations(range(k))) for _ in range(size)]
    return {"type": "steps", "steps": items, "submit": per_rank, "wait": [list(w) for w in waits]}


def cases(size: int):
    return st.lists(waves(size), min_size=1, max_size=4).map(lambda ws: {"size": size, "waves": ws})


# ---------------------------------------------------------------- expecting


def input_key(digest: int, wave: int, step: int, member: int) -> str:
    """The seed key of a member's inputs; ``digest`` is the case's ``case_digest``."""
    return f"{digest}/{wave}/{step}/{member}"


def make_input(key: str, rank: int, shape: Sequence[int], dtype: str, kind: str) -> np.ndarray:
    """Rank ``rank``'s input (bfloat16 as float32 values, exact in bfloat16)."""
    # np.asarray: rank_input gives a numpy scalar for shape ().
    return np.asarray(
        rank_input(key, rank, shape, np.float32 if dtype == "bfloat16" else np.dtype(dtype), kind)
    )


def member_shape(step, member: int, set_index: int) -> List[int]:
    """The shape rank ``set_index`` of the step's set gives member ``member`` (faults included)."""
    m = step["members"][member]
    shape = list(m["shape"])
    if shape and shape[0] is None:
        shape[0] = m["rows"][set_index]
    fault = step["fault"]
    if fault and fault["member"] == member and set_index in fault["ranks"]:
        if fault["what"] == "shape":
            shape = [shape[0] + 1] + shape[1:] if shape else [1]
        elif fault["what"] == "trailing":
            shape = shape[:1] + [shape[1] + 1] + shape[2:] if len(shape) >= 2 else shape + [2]
    return shape


def member_dtype(step, member: int, set_index: int) -> str:
    fault = step["fault"]
    if fault and fault["what"] == "dtype" and fault["member"] == member and set_index in fault["ranks"]:
        return fault["dtype"]
    return step["members"][member]["dtype"]


def value_kind(step) -> str:
    return "product" if step["op"] == "Product" else "small"


def expected_output(step, member: int, inputs: List[np.ndarray], me: int, ranks: List[int]) -> np.ndarray:
    """What rank ``me`` (index in the set of global ``ranks``) gets for member
    ``member`` of a step that succeeds, from every rank's input."""
    kind = step["kind"]
    n = len(inputs)
    if kind == "allreduce":
        return reference_reduce(inputs, OPS[step["op"]], step["prescale"], step["postscale"])
    if kind == "reducescatter":
        full = reference_reduce(inputs, OPS[step["op"]], step["prescale"], step["postscale"])
        return np.array_split(full, n)[me]
    if kind == "broadcast":
        return inputs[ranks.index(step["root"])]
    if kind == "allgather":
        return np.concatenate(inputs)
    splits = alltoall_splits(step, member)
    parts = []
    for sender in range(n):
        offsets = np.cumsum([0] + splits[sender])
        parts.append(inputs[sender][offsets[me] : offsets[me + 1]])
    return np.concatenate(parts)


def alltoall_splits(step, member: int) -> List[List[int]]:
    m = step["members"][member]
    n = len(m["rows"])
    if m["splits"] is not None:
        return m["splits"]
    return [[rows // n] * n for rows in m["rows"]]


# Half a unit in the last place, relative, of the half-precision types.
HALF_EPSILON = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def compare_tolerance(step, dtype: str, n: int) -> float:
    """The tolerance of assert_close for a result of ``dtype`` over ``n`` ranks.

    In float16 and bfloat16 a prescale factor that is not exact there (0.1,
    0.7) rounds each rank's input, by up to half a unit in the last place of
    |input * prescale| (inputs are at most 9), and the postscale factor
    carries those errors on: a result near 0 can be off by more than a
    tolerance relative to the result allows.
    """
    base = 2e-2 if dtype == "bfloat16" else tolerance(np.dtype(dtype))
    if dtype not in HALF_EPSILON or step["kind"] not in ("allreduce", "reducescatter"):
        return base
    return base + 2 * HALF_EPSILON[dtype] * n * 9 * abs(step["prescale"]) * max(1.0, abs(step["postscale"]))


def describe(step) -> str:
    """A short line naming a step, for failure messages."""
    parts = [
        step["kind"],
        "grouped" if step["grouped"] else "",
        "in place" if step["in_place"] else "",
        step["form"],
        f"set {step['set']}",
        f"name {step['name']!r}",
        step["op"] if step["kind"] in ("allreduce", "reducescatter") else "",
    ]
    if step["fault"]:
        parts.append(f"fault {step['fault']}")
    if step["refuse"]:
        parts.append(f"refuse {step['refuse']}")
    return ", ".join(p for p in parts if p)
