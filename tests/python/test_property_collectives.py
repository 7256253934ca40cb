"""Random sequences of collectives across ranks, drawn by Hypothesis (run under mpiexec with 2 and 3 ranks).

Each case (property_cases.py) is a few waves of collectives through
``accord`` (numpy) and ``accord.torch``, each rank free to use either API
for any step: allreduce with every op and scale factors, allgather,
broadcast, alltoall with splits, reducescatter, grouped forms, in place or
not, blocking, async or polled, torch tensors contiguous or not, every dtype,
shapes from empty to past a staging window, named (from a small pool of
names, so a name comes back with another shape, dtype or op) or unnamed, on
the global set and on added process sets, submitted in an order that differs
between ranks where that is allowed and waited for in each rank's own order.
Some steps are made inconsistent across ranks (shape, dtype, op, scale
factor, root, trailing dimensions, the collective under a name, the members
of a group), some get an invalid argument on some ranks (splits, root, op,
dtype, a scalar, a set the rank is not in), some re-use a name while it is
in flight, and process sets come and go between them. The property: every
call gives exactly the right result (every rank computes it from every
rank's seeded input), or raises the documented exception (``AccordError`` on
every rank of the set for a disagreement, ``ValueError`` at the call on the
ranks given a bad argument); nothing hangs, and afterwards unnamed
collectives on every set still line up.

Every rank draws the same cases: Hypothesis runs with a fixed seed
(``ACCORD_PROPERTY_SEED``), no example database, no shrinking, no deadline
and no health checks, since each of those depends on timing or on files that
differ between ranks. A case's first collective checks that every rank drew
the same one. A failing case is not shrunk (the ranks would shrink apart):
the rank that sees it prints the case as JSON, how to replay it, and ends the
job at once. A case that runs longer than ``ACCORD_PROPERTY_CASE_TIMEOUT``
seconds (default 60) is reported the same way, with every thread's stack.

    ACCORD_PROPERTY_EXAMPLES=<n>   cases per run (default 40; CTest runs 200)
    ACCORD_PROPERTY_SEED=<n>       the seed of the sequence (default 20261126)
    ACCORD_PROPERTY_REPLAY=<file>  run only the case (or list of cases) in <file>
"""

import faulthandler
import json
import os
import sys
import threading
import traceback

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings

import accord
import accord.torch as hvd
from accord import _core

import property_cases as pc
from conftest import assert_close, rank_input

SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
SEED = int(os.environ.get("ACCORD_PROPERTY_SEED", "20261126"))
EXAMPLES = int(os.environ.get("ACCORD_PROPERTY_EXAMPLES", "40"))
CASE_TIMEOUT = float(os.environ.get("ACCORD_PROPERTY_CASE_TIMEOUT", "60"))
REPLAY = os.environ.get("ACCORD_PROPERTY_REPLAY")

pytestmark = [
    pytest.mark.usefixtures("accord_initialized"),
    pytest.mark.skipif(SIZE < 2, reason="collectives across ranks: needs 2 or more"),
]


@pytest.fixture(scope="module")
def process_sets(accord_initialized):
    """The process sets of property_cases.set_layouts, registered on every rank."""
    layouts = pc.set_layouts(accord.size())
    sets = [accord.global_process_set] + [accord.add_process_set(ranks) for ranks in layouts[1:]]
    yield sets
    for s in sets[1:]:
        accord.remove_process_set(s)


# --------------------------------------------------------- failure reports

# The job's stderr: pytest captures fd 2 during a test, and a rank that ends
# the job does not live to print what it captured.
REPORTS = sys.stderr


@pytest.fixture(scope="module", autouse=True)
def reports_to_stderr(pytestconfig):
    global REPORTS
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    if capture is None:
        fd = os.dup(2)
    else:
        with capture.global_and_fixture_disabled():
            fd = os.dup(2)
    REPORTS = os.fdopen(fd, "w", buffering=1)
    yield
    REPORTS, stream = sys.stderr, REPORTS
    stream.close()


class CaseFailed(AssertionError):
    pass


class Watch:
    """Which case runs now; reports it and ends the job if it fails or hangs."""

    def __init__(self):
        self.number = 0
        self.case = None
        self.step = ""
        self._timer = None

    def start(self, case) -> None:
        self.number += 1
        self.case = case
        self.step = "the check that every rank drew this case"
        # A backstop if this process cannot run Python any more (a call that
        # holds the GIL): faulthandler's own thread dumps the stacks and exits.
        faulthandler.dump_traceback_later(CASE_TIMEOUT + 15, exit=True, file=REPORTS)
        self._timer = threading.Timer(CASE_TIMEOUT, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        self._timer.cancel()

    def _expired(self) -> None:
        self.fail(f"did not finish within {CASE_TIMEOUT:g} s (ACCORD_PROPERTY_CASE_TIMEOUT)", stacks=True)

    def fail(self, reason: str, stacks: bool = False) -> None:
        rank = accord.rank() if accord.is_initialized() else os.environ.get("OMPI_COMM_WORLD_RANK", "?")
        here = os.path.abspath(__file__)
        REPORTS.write(
            f"\n===== rank {rank}: property case #{self.number} of seed {SEED} FAILED in {self.step} =====\n"
            f"{reason}\n"
            f"case: {pc.case_json(self.case)}\n"
            f"replay this case alone: write the JSON after 'case: ' to case.json, then\n"
            f"  ACCORD_PROPERTY_REPLAY=case.json mpiexec -n {SIZE} python3 -m pytest -x -p no:cacheprovider "
            f"{here} -k replay\n"
            f"replay the whole sequence up to it:\n"
            f"  ACCORD_PROPERTY_SEED={SEED} ACCORD_PROPERTY_EXAMPLES={self.number} mpiexec -n {SIZE} "
            f"python3 -m pytest -x -p no:cacheprovider {here} -k random\n"
        )
        if stacks:
            faulthandler.dump_traceback(file=REPORTS, all_threads=True)
        REPORTS.write(f"===== rank {rank}: aborting every rank =====\n")
        REPORTS.flush()
        _core.abort(1)
        os._exit(1)


WATCH = Watch()


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailed(f"rank {accord.rank()}: {message}")


# ---------------------------------------------------------------- the calls


def to_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def as_api(array: np.ndarray, api: str, dtype: str, strided: bool = False):
    """``array`` as this rank's API takes it: a numpy copy, or a torch tensor
    (``strided``: a view that is not contiguous, for tensors of 2 or more dims)."""
    array = np.array(array)  # a copy, and an array also for a numpy scalar
    if api == "numpy":
        return array
    tensor = torch.from_numpy(array)
    if dtype == "bfloat16":
        tensor = tensor.to(torch.bfloat16)
    if strided and tensor.dim() >= 2:
        tensor = tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    return tensor


def submit(api: str, kind: str, grouped: bool, in_place: bool, blocking: bool, values, **kwargs):
    """Calls the collective; returns its result (blocking) or its handle."""
    module = accord if api == "numpy" else hvd
    function = (
        ("grouped_" if grouped else "") + kind + ("" if blocking else "_async") + ("_" if in_place else "")
    )
    return getattr(module, function)(values if grouped else values[0], **kwargs)


def wait(api: str, handle, poll: bool):
    if api == "numpy":
        while poll and not handle.poll():
            os.sched_yield()
        return handle.wait()
    while poll and not hvd.poll(handle):
        os.sched_yield()
    return hvd.synchronize(handle)


class StepRun:
    """One step of a wave on this rank: its role, its call and its checks."""

    def __init__(self, digest: int, wave_index: int, step_index: int, step, sets):
        self.step = step
        self.what = f"wave {wave_index} step {step_index} ({pc.describe(step)})"
        self.ranks = pc.set_layouts(SIZE)[step["set"]]
        self.process_set = sets[step["set"]]
        self.rank = accord.rank()
        self.index = self.ranks.index(self.rank) if self.rank in self.ranks else None
        self.api = step["api"][self.rank]
        self.keys = [pc.input_key(digest, wave_index, step_index, m) for m in range(len(step["members"]))]
        refuse = step["refuse"]
        if refuse is not None:
            self.role = "refuse" if self.rank in refuse["ranks"] else "skip"
        else:
            self.role = "skip" if self.index is None else "member"
        self.handle = None
        self.done = False

    # What this rank passes.

    def _my_input(self, member: int, set_index: int) -> np.ndarray:
        step = self.step
        return pc.make_input(
            self.keys[member],
            set_index,
            pc.member_shape(step, member, set_index),
            pc.member_dtype(step, member, set_index),
            pc.value_kind(step),
        )

    def _arguments(self):
        """(kind, grouped, in_place, values, dtypes, keyword arguments) of this rank's call."""
        step = self.step
        index = self.index if self.index is not None else 0
        kind, grouped, in_place = step["kind"], step["grouped"], step["in_place"]
        arrays = [self._my_input(m, index) for m in range(len(step["members"]))]
        dtypes = [pc.member_dtype(step, m, index) for m in range(len(arrays))]
        op, prescale, postscale, root = pc.OPS[step["op"]], step["prescale"], step["postscale"], step["root"]
        splits = None
        if kind == "alltoall":
            splits = step["members"][0]["splits"]
            splits = None if splits is None else list(splits[index])
        fault = step["fault"]
        if fault is not None and self.index in fault["ranks"]:
            what = fault["what"]
            if what == "op":
                op = pc.OPS[fault["op"]]
            elif what == "scale":
                prescale = prescale * 2.0
            elif what == "root":
                root = fault["root"]
            elif what == "kind":
                kind, grouped = ("allreduce" if kind == "broadcast" else "broadcast"), False
                in_place, op, prescale, postscale, root = False, accord.Sum, 1.0, 1.0, self.ranks[0]
            elif what == "members" and fault["extra"]:
                arrays.append(arrays[-1].copy())
                dtypes.append(dtypes[-1])
            elif what == "members":
                arrays, dtypes = arrays[:-1], dtypes[:-1]
        if self.role == "refuse":
            what = step["refuse"]["what"]
            if what == "bad_op":
                op = pc.BAD_OP
            elif what == "reducescatter_op":
                op = accord.Max
            elif what == "root_outside":
                outside = [r for r in range(SIZE) if r not in self.ranks]
                root = outside[0] if outside else SIZE + 3
            elif what in ("bool_average", "bool_scale"):
                arrays = [a != 0 for a in arrays]
                dtypes = ["bool"] * len(arrays)
                if what == "bool_average":
                    op = accord.Average
                else:
                    op, prescale = accord.Sum, 2.0
            elif what == "mixed_bool":
                arrays[0], dtypes[0] = arrays[0] != 0, "bool"
                if dtypes[1] == "bool":
                    arrays[1], dtypes[1] = arrays[1].astype(np.float32), "float32"
            elif what == "scalar":
                arrays[0] = (
                    arrays[0].reshape(-1)[:1].reshape(()) if arrays[0].size else np.zeros((), arrays[0].dtype)
                )
            elif what.startswith("splits_") or what == "no_splits_uneven":
                rows = arrays[0].shape[0]
                n = len(self.ranks)
                even = [rows // n] * n if splits is None else splits
                if what == "splits_sum":
                    splits = [even[0] + 1] + even[1:]
                elif what == "splits_len":
                    splits = even + [0]
                elif what == "splits_negative":
                    splits = [-1, even[1] + even[0] + 1] + even[2:] if n >= 2 else [-1]
                else:  # no splits, and a dim 0 that does not divide by the set's size
                    splits = None
                    if rows % n == 0:
                        arrays[0] = np.concatenate(
                            [arrays[0], np.zeros((1,) + arrays[0].shape[1:], arrays[0].dtype)]
                        )
        kwargs = {"name": step["name"], "process_set": self.process_set}
        if kind in ("allreduce", "reducescatter"):
            kwargs.update(op=op, prescale_factor=prescale, postscale_factor=postscale)
        elif kind == "broadcast":
            kwargs["root_rank"] = root
        elif kind == "alltoall":
            kwargs["splits"] = splits
        return kind, grouped, in_place, arrays, dtypes, kwargs

    # Submitting and waiting.

    def submit(self) -> None:
        if self.role == "skip":
            self.done = True
            return
        kind, grouped, in_place, arrays, dtypes, kwargs = self._arguments()
        self.values = [as_api(a, self.api, d, self.step["strided"]) for a, d in zip(arrays, dtypes)]
        self.originals = [to_numpy(v).copy() for v in self.values]
        blocking = self.step["form"] == "sync"
        try:
            out = submit(self.api, kind, grouped, in_place, blocking, self.values, **kwargs)
        except ValueError as error:
            check(self.role == "refuse", f"{self.what}: ValueError at the call: {error}")
            self.done = True
            return
        except accord.AccordError as error:
            check(
                blocking and self.step["fault"] is not None,
                f"{self.what}: AccordError ({error.code}) from the call: {error}",
            )
            self._check_error(error)
            self.done = True
            return
        check(
            self.role != "refuse",
            f"{self.what}: the call with a bad argument "
            f"({self.step['refuse'] and self.step['refuse']['what']}) was accepted",
        )
        if blocking:
            self._check_result(out)
            self.done = True
        else:
            self.handle = out

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            out = wait(self.api, self.handle, self.step["form"] == "poll")
        except accord.AccordError as error:
            self._check_error(error)
            return
        self._check_result(out)

    # Checks.

    def _check_error(self, error: Exception) -> None:
        check(self.step["fault"] is not None, f"{self.what}: failed: {type(error).__name__}: {error}")
        check(
            isinstance(error, accord.HorovodInternalError) and isinstance(error, RuntimeError),
            f"{self.what}: raised {type(error).__name__}, not HorovodInternalError",
        )
        check(
            error.code == "MISMATCH", f"{self.what}: error code {error.code!r}, expected 'MISMATCH': {error}"
        )
        message = str(error)
        expected_name = self.step["name"] if self.step["name"] is not None else "noname"
        check(expected_name in message, f"{self.what}: the error does not name the tensor: {message}")
        self._check_inputs_kept()

    def _check_inputs_kept(self) -> None:
        if self.step["in_place"]:
            return
        for m, (value, original) in enumerate(zip(self.values, self.originals)):
            assert_close(
                to_numpy(value), original, f"{self.what}: member {m}'s input (out of place: must not change)"
            )

    def _check_result(self, out) -> None:
        step = self.step
        check(
            step["fault"] is None, f"{self.what}: ranks disagreed, yet the call returned {type(out).__name__}"
        )
        members = len(step["members"])
        outputs = list(out) if step["grouped"] else [out]
        check(len(outputs) == members, f"{self.what}: {len(outputs)} outputs for {members} tensors")
        for m in range(members):
            got = outputs[m]
            if step["in_place"]:
                check(
                    got is self.values[m],
                    f"{self.what}: member {m}: an in-place call returned another object",
                )
            if step["kind"] == "alltoall":
                # (output, received_splits) when splits are given, and always
                # from accord.torch's synchronize (as Horovod's).
                pair = step["members"][m]["splits"] is not None or (
                    self.api == "torch" and step["form"] != "sync"
                )
                if pair:
                    check(
                        isinstance(got, tuple) and len(got) == 2,
                        f"{self.what}: alltoall with splits returned {type(got).__name__}, "
                        f"not (output, splits)",
                    )
                    got, received = got
                    splits = pc.alltoall_splits(step, m)
                    expected = np.array([splits[s][self.index] for s in range(len(self.ranks))], np.int64)
                    assert_close(
                        to_numpy(received).astype(np.int64), expected, f"{self.what}: received splits"
                    )
                else:
                    check(
                        not isinstance(got, tuple), f"{self.what}: alltoall without splits returned a tuple"
                    )
            inputs = [self._my_input(m, i) for i in range(len(self.ranks))]
            expected = pc.expected_output(step, m, inputs, self.index, self.ranks)
            dtype = pc.member_dtype(step, m, self.index)
            assert_close(
                to_numpy(got),
                expected,
                f"{self.what}: member {m} ({dtype})",
                pc.compare_tolerance(step, dtype, len(self.ranks)),
            )
        self._check_inputs_kept()


# ------------------------------------------------------------------- a case


def run_wave(digest: int, wave_index: int, wave, sets) -> None:
    runs = [StepRun(digest, wave_index, i, s, sets) for i, s in enumerate(wave["steps"])]
    me = accord.rank()
    for i in wave["submit"][me]:
        WATCH.step = f"submitting {runs[i].what}"
        runs[i].submit()
    for i in wave["wait"][me]:
        WATCH.step = f"waiting for {runs[i].what}"
        runs[i].finish()


def run_in_flight(digest: int, wave_index: int, wave, sets) -> None:
    """A name submitted again while in flight: ValueError, and the first call completes.

    The set's last rank submits the name only after the others tried it
    twice (and met it in a collective), so it is in flight on those ranks.
    """
    ranks = pc.set_layouts(SIZE)[wave["set"]]
    me = accord.rank()
    if me not in ranks:
        return
    process_set, name, api = sets[wave["set"]], wave["name"], wave["api"][me]
    key = pc.input_key(digest, wave_index, 0, 0)
    WATCH.step = f"wave {wave_index}: {name!r} submitted again while in flight (set {wave['set']})"
    inputs = [rank_input(key, r, (6,), np.float32) for r in ranks]
    mine = as_api(inputs[ranks.index(me)], api, "float32")

    def first():
        return submit(
            api, "allreduce", False, False, False, [mine], op=accord.Sum, name=name, process_set=process_set
        )

    def go():
        accord.allreduce(np.zeros(1, np.int32), op=accord.Sum, name=f"{name}.go", process_set=process_set)

    if me != ranks[-1]:
        handle = first()
        again = as_api(inputs[ranks.index(me)], api, "float32")
        try:
            submit(api, wave["retry_kind"], False, False, False, [again], name=name, process_set=process_set)
        except ValueError as error:
            check(
                "in flight" in str(error) and name in str(error),
                f"{WATCH.step}: the ValueError does not say so: {error}",
            )
        else:
            raise CaseFailed(f"rank {me}: {WATCH.step}: the second {wave['retry_kind']} was accepted")
        go()
    else:
        go()
        handle = first()
    got = to_numpy(wait(api, handle, False))
    assert_close(got, np.sum(np.stack(inputs), axis=0), f"{WATCH.step}: the first allreduce")


def run_process_set(digest: int, wave_index: int, wave) -> None:
    """A process set added at run time, used by its members (and refused to
    the others), and removed: on every rank, whatever else ran before."""
    ranks, me, api = wave["ranks"], accord.rank(), wave["api"][accord.rank()]
    module = accord if api == "numpy" else hvd
    WATCH.step = f"wave {wave_index}: process set {ranks} added, used and removed"
    process_set = module.add_process_set(ranks)
    if me in ranks:
        key = pc.input_key(digest, wave_index, 0, 0)
        inputs = [rank_input(key, r, (5,), np.float64) for r in ranks]
        handle = submit(
            api,
            "allreduce",
            False,
            False,
            False,
            [as_api(inputs[ranks.index(me)], api, "float64")],
            op=accord.Sum,
            name=wave["name"],
            process_set=process_set,
        )
        gathered = submit(
            api,
            "allgather",
            False,
            False,
            True,
            [as_api(np.array([me], np.int64), api, "int64")],
            name=None,
            process_set=process_set,
        )
        assert_close(to_numpy(gathered), np.array(ranks, np.int64), f"{WATCH.step}: allgather of the ranks")
        assert_close(
            to_numpy(wait(api, handle, False)), np.sum(np.stack(inputs), axis=0), f"{WATCH.step}: allreduce"
        )
    else:
        try:
            submit(
                api,
                "allreduce",
                False,
                False,
                False,
                [as_api(np.ones(2), api, "float64")],
                name=wave["name"],
                process_set=process_set,
            )
        except ValueError:
            pass
        else:
            raise CaseFailed(f"rank {me}: {WATCH.step}: an allreduce on a set without this rank was accepted")
    check(module.remove_process_set(process_set), f"{WATCH.step}: remove_process_set returned False")
    try:
        submit(
            api,
            "allreduce",
            False,
            False,
            True,
            [as_api(np.ones(2), api, "float64")],
            process_set=process_set,
        )
    except ValueError:
        pass
    else:
        raise CaseFailed(f"rank {me}: {WATCH.step}: an allreduce on the removed set was accepted")


def in_step(sets) -> None:
    """Unnamed collectives on every set: they line up only if no rank has a
    stale auto-name number, pending operation or process set."""
    WATCH.step = "the unnamed collectives after the case"
    me = accord.rank()
    total = accord.allreduce(np.array([me + 1.0]), op=accord.Sum)
    check(total[0] == SIZE * (SIZE + 1) / 2, f"unnamed allreduce gave {total}")
    gathered = hvd.allgather(torch.full((me + 1, 2), float(me)))
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(SIZE)])
    check(torch.equal(gathered, expected), f"unnamed allgather gave {gathered.tolist()}")
    root = accord.broadcast(np.array([me * 10], np.int64), root_rank=SIZE - 1)
    check(root[0] == (SIZE - 1) * 10, f"unnamed broadcast gave {root}")
    for ranks, process_set in zip(pc.set_layouts(SIZE)[1:], sets[1:]):
        if me in ranks:
            got = hvd.allreduce(
                torch.tensor([me + 1], dtype=torch.int64), op=hvd.Sum, process_set=process_set
            )
            check(
                got.item() == sum(r + 1 for r in ranks), f"unnamed allreduce on set {ranks} gave {got.item()}"
            )


def run_case(case, sets) -> None:
    WATCH.start(case)
    try:
        check(case["size"] == SIZE, f"the case is for {case['size']} ranks, this job has {SIZE}")
        digest = pc.case_digest(case)
        digests = accord.allgather(np.array([digest], np.int64), name="property.case")
        check(bool((digests == digest).all()), f"the ranks drew different cases: digests {digests.tolist()}")
        for wave_index, wave in enumerate(case["waves"]):
            if wave["type"] == "in_flight":
                run_in_flight(digest, wave_index, wave, sets)
            elif wave["type"] == "process_set":
                run_process_set(digest, wave_index, wave)
            else:
                run_wave(digest, wave_index, wave, sets)
        in_step(sets)
    except BaseException:  # noqa: BLE001 - any failure ends the job with the case printed
        WATCH.fail(traceback.format_exc())
    finally:
        WATCH.stop()


# -------------------------------------------------------------------- tests


@pytest.mark.skipif(REPLAY is not None, reason="ACCORD_PROPERTY_REPLAY is set: replaying one case")
@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
    print_blob=False,
)
@given(case=pc.cases(max(SIZE, 2)))
def test_random_sequences_of_collectives(process_sets, case):
    run_case(case, process_sets)


@pytest.mark.skipif(REPLAY is None, reason="set ACCORD_PROPERTY_REPLAY=<case.json> to replay a printed case")
def test_replay_case(process_sets):
    with open(REPLAY) as f:
        loaded = json.load(f)
    for case in loaded if isinstance(loaded, list) else [loaded]:
        run_case(case, process_sets)
