"""join() next to collectives a joined rank cannot stand in for (run with 2, 3 and 4 ranks).

Some ranks join; the others run an allreduce (which the joined ranks take
part in with zeros), then an allgather and a broadcast. Those two must fail
with HorovodInternalError (a RuntimeError, not a ValueError) on every rank
that submitted them, naming the joined ranks. Then every remaining rank
joins, all agree on the last rank to join, and the next collectives work on
every rank. Unnamed, as Horovod scripts write them, the collectives after
the join still match: the joined ranks counted the others' unnamed ones.
"""

import pytest
import torch

import accord.torch as hvd

from torch_helpers import Checker, rank_values

# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def joiners_for(pattern, size):
    """The ranks that join first: rank 0, the last rank, or every even rank."""
    if pattern == "first":
        return [0]
    if pattern == "last":
        return [size - 1]
    return list(range(0, size, 2))


def joined_text(ranks):
    """How the error names the joined ranks: "rank 0 has joined", "ranks 0, 2 have joined"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]} has joined"
    return "ranks " + ", ".join(str(r) for r in ranks) + " have joined"


def expect_joined_failure(check, what, operation, joiners, run):
    try:
        run()
    except hvd.HorovodInternalError as error:
        message = str(error)
        check.true(
            isinstance(error, RuntimeError) and not isinstance(error, ValueError),
            f"{what}: raised {type(error).__mro__}",
        )
        check.true(
            operation in message and joined_text(joiners) in message,
            f"{what}: the message should name the {operation} and say '{joined_text(joiners)}': {message}",
        )
        check.true(
            getattr(error, "code", None) == "MISMATCH",
            f"{what}: code {getattr(error, 'code', None)!r}, expected 'MISMATCH'",
        )
    except Exception as error:  # the wrong exception: report it, then go on to join
        check.true(False, f"{what}: raised {type(error).__name__} instead of HorovodInternalError: {error}")
    else:
        check.true(False, f"{what}: did not raise while {joined_text(joiners)}")


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
@pytest.mark.parametrize("pattern", ["first", "last", "evens"])
def test_allgather_and_broadcast_fail_while_ranks_have_joined(pattern, named):
    size, me = hvd.size(), hvd.rank()
    if size < 2:
        pytest.skip("needs a rank that joins and one that does not")
    joiners = joiners_for(pattern, size)
    active = [r for r in range(size) if r not in joiners]
    check = Checker()
    key = f"join.{pattern}.{'named' if named else 'unnamed'}"

    def name(part):
        return f"{key}.{part}" if named else None

    if me in joiners:
        last = hvd.join()
    else:
        # Joined ranks add zeros to Sum allreduces. This one completes only
        # once every joiner's join is known, like the failures below.
        x = rank_values(key + ".sum", me, [5], torch.float64)
        got = hvd.allreduce(x, op=hvd.Sum, name=name("sum"))
        expected = sum(rank_values(key + ".sum", r, [5], torch.float64) for r in active)
        check.values(key + ".sum", got, expected)

        rows = torch.full([2, 3], float(me))
        expect_joined_failure(
            check,
            f"allgather ({pattern})",
            "allgather",
            joiners,
            lambda: hvd.allgather(rows, name=name("allgather")),
        )
        expect_joined_failure(
            check,
            f"broadcast ({pattern})",
            "broadcast",
            joiners,
            lambda: hvd.broadcast(rows, active[0], name=name("broadcast")),
        )
        last = hvd.join()

    # Everyone agrees on the last rank to join, one that had not joined before.
    every = hvd.allgather(torch.tensor([last]), name=name("last"))
    check.true(bool((every == last).all()), f"ranks disagree on the last rank to join: {every}")
    check.true(last in active, f"join() returned {last}, a rank that joined first ({joiners})")

    # The next collectives work on every rank.
    gathered = hvd.allgather(rank_values(key + ".after", me, [2, 2], torch.float32), name=name("after"))
    check.values(
        key + ".after",
        gathered,
        torch.cat([rank_values(key + ".after", r, [2, 2], torch.float32) for r in range(size)]),
    )
    root = size - 1
    sent = hvd.broadcast(rank_values(key + ".bcast", me, [3], torch.float32), root, name=name("bcast"))
    check.values(key + ".bcast", sent, rank_values(key + ".bcast", root, [3], torch.float32))
    check.check()
