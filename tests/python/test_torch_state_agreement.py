"""broadcast_parameters and broadcast_optimizer_state refuse models that differ between ranks.

When the ranks hold different tensors (a layer only one rank has, a shape
or a dtype that differs), every rank must raise a ValueError at once that
names the first differing tensors and the ranks holding each version,
instead of some ranks waiting for broadcasts that never come; afterwards
accord must still work. The last rank is the odd one out, so at 3 ranks the
message groups two ranks together.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_state_agreement.py
"""

import pytest
import torch

import accord.torch as hvd
from accord.torch.tensor_agreement import explain

# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def spelled(ranks):
    listed = ", ".join(str(r) for r in ranks)
    return f"rank {listed}" if len(ranks) == 1 else f"ranks {listed}"


def odd_one_out():
    """The last rank, and (as the message spells them) the others."""
    if hvd.size() == 1:
        pytest.skip("needs two ranks whose models differ")
    return hvd.size() - 1, spelled(range(hvd.size() - 1))


def model(extra_layer=False, width=6, dtype=torch.float32):
    layers = [torch.nn.Linear(4, width), torch.nn.BatchNorm1d(width), torch.nn.Linear(width, 2)]
    if extra_layer:
        layers.append(torch.nn.Linear(2, 3))
    return torch.nn.Sequential(*layers).to(dtype)


def raised_message(call):
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


def accord_still_works():
    """A collective after the refusal completes with the right value on every rank."""
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="after_refusal")
    expected = hvd.size() * (hvd.size() + 1) / 2
    assert total.item() == expected, f"rank {hvd.rank()}: got {total.item()}, expected {expected}"


def test_a_layer_only_one_rank_has():
    odd, others = odd_one_out()
    mine = model(extra_layer=hvd.rank() == odd)
    message = raised_message(lambda: hvd.broadcast_parameters(mine.state_dict(), root_rank=0))
    expected = (
        f"broadcast_parameters: the ranks' tensors differ: '3.weight' is missing on {others} "
        f"(present on rank {odd} as float32 [3, 2]); '3.bias' is missing on {others} (present "
        f"on rank {odd} as float32 [3])"
    )
    assert message == expected, f"rank {hvd.rank()}: {message!r}"
    accord_still_works()


def test_a_shape_and_a_dtype_that_differ():
    odd, others = odd_one_out()
    width = 5 if hvd.rank() == odd else 6
    mine = model(width=width)
    message = raised_message(lambda: hvd.broadcast_parameters(mine.named_parameters(), root_rank=0))
    expected_first = (
        f"the ranks' tensors differ: '0.weight' is float32 [6, 4] on {others} and "
        f"float32 [5, 4] on rank {odd}; '0.bias' is float32 [6] on {others} and "
        f"float32 [5] on rank {odd}; '1.weight' is"
    )
    assert expected_first in message and message.endswith("; and 2 more"), f"rank {hvd.rank()}: {message!r}"

    mine = model(dtype=torch.float64 if hvd.rank() == odd else torch.float32)
    message = raised_message(lambda: hvd.broadcast_parameters(mine.state_dict(), root_rank=0))
    assert f"'0.weight' is float32 [6, 4] on {others} and float64 [6, 4] on rank {odd}" in message, (
        f"rank {hvd.rank()}: {message!r}"
    )
    # num_batches_tracked is int64 everywhere: not named.
    assert "num_batches_tracked" not in message, f"rank {hvd.rank()}: {message!r}"
    accord_still_works()


def test_unnamed_tensors_in_another_order():
    odd, others = odd_one_out()
    tensors = [torch.zeros(2), torch.zeros(3)]
    if hvd.rank() == odd:
        tensors.reverse()
    message = raised_message(lambda: hvd.broadcast_parameters(tensors, root_rank=0))
    assert (
        f"'#0' is float32 [2] on {others} and float32 [3] on rank {odd}; '#1' is float32 [3] "
        f"on {others} and float32 [2] on rank {odd}"
    ) in message, f"rank {hvd.rank()}: {message!r}"
    accord_still_works()


def test_named_tensors_in_another_order_agree():
    """Named tensors are matched by name: another order is no difference."""
    root = 0
    items = [(f"t{i}", torch.full((i + 1,), float(hvd.rank() * 10 + i))) for i in range(4)]
    if hvd.rank() % 2 == 1:
        items.reverse()
    hvd.broadcast_parameters(items, root_rank=root)
    for name, tensor in items:
        i = int(name[1:])
        assert torch.equal(tensor, torch.full((i + 1,), float(root * 10 + i))), (
            f"rank {hvd.rank()}: {name} = {tensor.tolist()}"
        )


def test_optimizer_parameters_that_differ_are_named():
    odd, others = odd_one_out()
    mine = model(extra_layer=hvd.rank() == odd)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(mine.parameters(), lr=0.1), named_parameters=mine.named_parameters()
    )
    message = raised_message(lambda: hvd.broadcast_optimizer_state(opt, root_rank=0))
    expected = (
        f"broadcast_optimizer_state: the ranks' tensors differ: 'param_groups[0][6] (3.weight)' "
        f"is missing on {others} (present on rank {odd} as float32 [3, 2]); "
        f"'param_groups[0][7] (3.bias)' is missing on {others} (present on rank {odd} as "
        f"float32 [3])"
    )
    assert message == expected, f"rank {hvd.rank()}: {message!r}"
    accord_still_works()


def test_a_process_set_names_global_ranks():
    """On a set of the last two ranks, the message names their global ranks."""
    if hvd.size() < 3:
        pytest.skip("needs a process set that is not every rank")
    members = [hvd.size() - 2, hvd.size() - 1]
    subset = hvd.add_process_set(members)
    try:
        if hvd.rank() in members:
            mine = model(extra_layer=hvd.rank() == members[1])
            message = raised_message(
                lambda: hvd.broadcast_parameters(mine.state_dict(), root_rank=members[0], process_set=subset)
            )
            expected = (
                f"'3.weight' is missing on rank {members[0]} (present on rank {members[1]} as float32 [3, 2])"
            )
            assert expected in message, f"rank {hvd.rank()}: {message!r}"
    finally:
        hvd.remove_process_set(subset)


def test_explain_counts_what_it_does_not_spell_out():
    """Four differing names: three spelled out, the fourth counted (no collective)."""
    a = [(f"w{i}", "float32", (i + 1,)) for i in range(5)]
    b = [(f"w{i}", "float32", (i + 2,)) for i in range(4)] + [a[4]]
    text = explain([a, b, a], [0, 1, 2])
    assert text == (
        "'w0' is float32 [1] on ranks 0, 2 and float32 [2] on rank 1; "
        "'w1' is float32 [2] on ranks 0, 2 and float32 [3] on rank 1; "
        "'w2' is float32 [3] on ranks 0, 2 and float32 [4] on rank 1; and 1 more"
    ), text
    missing = explain([a[:1], []], [4, 7])
    assert missing == "'w0' is missing on rank 7 (present on rank 4 as float32 [1])", missing
    mixed = explain([a[:1], [], [("w0", "int64", (1,))]], [0, 1, 2])
    assert mixed == "'w0' is float32 [1] on rank 0 and int64 [1] on rank 2, missing on rank 1", mixed
