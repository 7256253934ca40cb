"""accord.torch.elastic (hvd.elastic): states, the run decorator and ElasticSampler, across real ranks.

Every rank starts from different values (seeded by its rank), so a sync that
did not give every rank rank 0's state, or a restore that did not return to
the commit, shows as a difference. A change of hosts is announced to a
single rank with on_hosts_updated: every rank must raise
HostsUpdatedInterrupt at the same commit, and run must reset (accord shut
down and initialized again, the reset callbacks called) and start the
function again.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_elastic.py
"""

import pytest
import torch

import accord.torch as hvd
from accord.torch.elastic import (
    ElasticSampler,
    HostsUpdatedInterrupt,
    HostUpdateResult,
    ObjectState,
    TorchState,
)

# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def rank_model(frozen=True):
    torch.manual_seed(100 + hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    if frozen:
        model[0].weight.requires_grad_(False)
    return model


def train_step(model, optimizer, same_data=False):
    """One step on data of this rank's own, or (`same_data`) the same on every rank."""
    torch.manual_seed(7 if same_data else 7 + hvd.rank())
    model(torch.randn(5, 4)).pow(2).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def gathered(tensor):
    """Every rank's copy of `tensor`, rank by rank."""
    return hvd.allgather_object(tensor.detach().clone())


def assert_same_everywhere(model, what):
    for name, value in model.state_dict().items():
        for r, other in enumerate(gathered(value)):
            assert torch.equal(other, value), f"{what}: '{name}' on rank {r} differs from rank {hvd.rank()}'s"


def test_object_state_commits_restores_and_syncs_from_rank_0():
    state = ObjectState(hvd.broadcast_object, hvd.rank, epoch=hvd.rank(), names=[f"r{hvd.rank()}"])
    state.sync()
    assert (state.epoch, state.names) == (0, ["r0"]), f"rank {hvd.rank()}: not rank 0's after sync"
    state.epoch = 3
    state.commit()
    state.epoch = 9
    state.names = ["changed"]
    state.restore()
    assert (state.epoch, state.names) == (3, ["r0"])


def test_torch_state_restores_the_commit_exactly():
    model = rank_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_step(model, optimizer)  # momentum buffers exist
    state = TorchState(model, optimizer, batch=0)
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    committed_momentum = [
        optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters() if p.requires_grad
    ]
    state.batch = 5
    state.commit()
    for _ in range(3):
        train_step(model, optimizer)
    state.batch = 8
    state.restore()
    assert state.batch == 5
    for name, value in model.state_dict().items():
        assert torch.equal(value, committed[name]), f"rank {hvd.rank()}: '{name}' not restored"
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters() if p.requires_grad]
    assert all(torch.equal(a, b) for a, b in zip(momentum, committed_momentum))
    assert model[0].weight.requires_grad is False


def test_torch_state_syncs_rank_0s_model_optimizer_and_objects():
    model = rank_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1))  # no per-parameter state
    state = TorchState(model=model, optimizer=optimizer, epoch=hvd.rank(), note={"from": hvd.rank()})
    state.sync()
    assert_same_everywhere(model, "after sync")
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    assert (state.epoch, state.note) == (0, {"from": 0})
    assert state.model is model and state.optimizer is optimizer


def test_torch_state_with_no_model_or_optimizer_keeps_them_none():
    state = TorchState(step=hvd.rank())
    state.sync()
    assert state.model is None and state.optimizer is None and state.step == 0


def test_a_host_update_seen_by_one_rank_interrupts_every_rank_at_the_same_commit():
    state = ObjectState(hvd.broadcast_object, hvd.rank, value=1)
    state.commit()  # nothing announced: no interrupt
    if hvd.rank() == hvd.size() - 1:
        state.on_hosts_updated(10, HostUpdateResult.added)
    with pytest.raises(HostsUpdatedInterrupt) as raised:
        state.commit()
    assert raised.value.skip_sync is False
    state.commit()  # the same news is not acted on twice
    if hvd.rank() == 0:
        state.on_hosts_updated(5, HostUpdateResult.removed)  # older than the last: ignored
    state.check_host_updates()
    if hvd.rank() == 0:
        state.on_hosts_updated(11, HostUpdateResult.removed)
    with pytest.raises(HostsUpdatedInterrupt) as raised:
        state.check_host_updates()
    assert raised.value.skip_sync is True, "hosts only removed: the ranks left need no sync"
    if hvd.rank() == 0:
        state.on_hosts_updated(12, HostUpdateResult.removed)
    if hvd.rank() == hvd.size() - 1:
        state.on_hosts_updated(13, HostUpdateResult.added)
    with pytest.raises(HostsUpdatedInterrupt) as raised:
        state.check_host_updates()
    assert raised.value.skip_sync is False, "hosts removed and added: a sync is needed"


def test_run_resets_and_starts_again_after_a_host_update():
    model = rank_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TorchState(model, optimizer, attempts=0, steps=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state, total_steps):
        state.attempts += 1
        while state.steps < total_steps:
            train_step(state.model, state.optimizer, same_data=True)
            state.steps += 1
            if state.steps == 2 and state.attempts == 1 and hvd.rank() == 0:
                state.on_hosts_updated(1, HostUpdateResult.added)
            state.commit()
        return state.steps

    assert train(state, 4) == 4
    assert resets == [hvd.size()], "one reset, after which accord is initialized again"
    assert hvd.is_initialized()
    assert state.attempts == 2
    # Synced at the start (the ranks' models differed) and trained alike.
    assert_same_everywhere(model, "after training")


def test_run_leaves_a_failed_collective_to_the_caller():
    state = ObjectState(hvd.broadcast_object, hvd.rank, calls=0)

    @hvd.elastic.run
    def train(state):
        state.calls += 1
        raise hvd.HorovodInternalError("a peer failed")

    with pytest.raises(hvd.HorovodInternalError, match="a peer failed"):
        train(state)
    assert state.calls == 1


def test_elastic_sampler_partitions_the_dataset_over_the_ranks():
    sampler = ElasticSampler(list(range(24)), shuffle=True, seed=3)
    mine = list(sampler)
    assert len(mine) == len(sampler) == 24 // hvd.size()
    everyone = [i for part in hvd.allgather_object(mine) for i in part]
    assert sorted(everyone) == list(range(24)), "every index on exactly one rank"
    sampler.set_epoch(1)
    assert sorted(i for part in hvd.allgather_object(list(sampler)) for i in part) == list(range(24))
    assert list(sampler) != mine or hvd.size() == 24, "a new epoch shuffles differently"


def test_elastic_sampler_after_a_reset_processes_every_sample_once():
    dataset = list(range(24))
    model = rank_model(frozen=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = ElasticSampler(dataset, shuffle=True, seed=1)
    state = TorchState(model, optimizer, sampler=sampler, restarted=False)
    processed = []  # indices this rank processed, across attempts

    @hvd.elastic.run
    def train(state):
        batch_size = 2
        for batch_idx in range(len(state.sampler) // batch_size):
            processed.extend(state.sampler.get_indices(batch_idx, batch_size))
            state.sampler.record_batch(batch_idx, batch_size)
            if batch_idx == 1 and not state.restarted:
                # Hosts removed after two batches: the ranks that remain go on
                # with what no rank has processed, split between them anew.
                state.restarted = True
                if hvd.rank() == 0:
                    state.on_hosts_updated(1, HostUpdateResult.removed)
            state.commit()

    train(state)
    assert state.restarted
    everyone = sorted(i for part in hvd.allgather_object(processed) for i in part)
    assert everyone == dataset, f"rank {hvd.rank()}: samples processed {everyone}"
    recorded = set().union(*hvd.allgather_object(state.sampler.processed_indices))
    assert recorded == set(dataset), "the ranks' records together hold the whole epoch"
