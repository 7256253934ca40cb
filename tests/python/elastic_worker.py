"""One rank of a generation of an elastic job, for test_torch_elastic_driver.py.

Run by mpirun with the ACCORD_ELASTIC_* variables a driver would set (the
test's fake driver listens at ACCORD_ELASTIC_DRIVER):

    elastic_worker.py train <steps>   train <steps> steps, committing after each, and return
    elastic_worker.py until-reset     train and commit until the hosts change (at most 50 steps)
    elastic_worker.py resume          check the state restored from ACCORD_ELASTIC_RESTORE on
                                      every rank, then train one more step and return
    elastic_worker.py error           commit once, then raise ValueError
    elastic_worker.py failure         commit once, then raise HorovodInternalError

Step k (counted across generations: it is commit k) gives values that the
test can compute: every gradient is 1, so SGD's momentum buffers hold
1 + 0.9 + ... + 0.9^(k-1); then every parameter is set to k; ``step`` is k,
``history`` is [1, ..., k] (appended in place), ``note`` is rank 0's; the
sampler records one batch of 2 per rank and step. Every rank starts from
values of its own, so a missed restore or sync shows.

After each commit the ranks that write spill files wait until the test has
checked the file and created ``<ACCORD_TEST_ACK_DIR>/<host>-c<k>``, so no
later commit deletes it first.
"""

import os
import sys
import time

import torch

import accord.torch as hvd
from accord.torch.elastic import ElasticSampler, HostsUpdatedInterrupt, TorchState

DATASET_SIZE = 400
BATCH = 2


def momentum_after(steps: int) -> float:
    return sum(0.9**i for i in range(steps))


def make_state(rank: int) -> TorchState:
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ElasticSampler(list(range(DATASET_SIZE)), shuffle=True, seed=5)
    return TorchState(model, optimizer, sampler=sampler, step=0, history=[], note=f"rank {rank}")


def train_step(state: TorchState, batch: int) -> None:
    for p in state.model.parameters():
        p.grad = torch.ones_like(p)
    state.optimizer.step()
    state.step += 1
    with torch.no_grad():
        for p in state.model.parameters():
            p.fill_(float(state.step))
    state.history.append(state.step)
    state.sampler.record_batch(batch, BATCH)


def wait_for_ack(host: str, n: int) -> None:
    marker = os.path.join(os.environ["ACCORD_TEST_ACK_DIR"], f"{host}-c{n}")
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never checked commit {n} of host {host}")
        time.sleep(0.01)


def commit(state: TorchState, rank: int, host: str, writer: bool) -> None:
    try:
        state.commit()
    except HostsUpdatedInterrupt:
        # No newline and no flush (mpirun's pty makes stdout line-buffered):
        # run must flush it before the process ends.
        sys.stdout.write(f"INTERRUPTED rank={rank} commit={state.commit_count};")
        raise
    if writer:
        wait_for_ack(host, state.commit_count)


def check_restored(state: TorchState, resets: list) -> None:
    """The state is the commit of ACCORD_ELASTIC_RESTORE on every rank, re-partitioned over this size."""
    rank, size = hvd.rank(), hvd.size()
    n = state.commit_count
    saved = torch.load(os.environ["ACCORD_ELASTIC_RESTORE"], weights_only=False)
    assert n == saved["commit"] > 0, f"rank {rank}: commit count {n}, file's {saved['commit']}"
    assert (state.step, state.history, state.note) == (n, list(range(1, n + 1)), "rank 0"), (
        f"rank {rank}: objects {(state.step, state.history, state.note)}"
    )
    for name, value in state.model.state_dict().items():
        assert torch.all(value == float(n)), (
            f"rank {rank}: model '{name}' is {value.flatten()[:3]}, expected {n}"
        )
    for p in state.model.parameters():
        buffer = state.optimizer.state[p]["momentum_buffer"]
        assert torch.allclose(buffer, torch.full_like(buffer, momentum_after(n))), (
            f"rank {rank}: momentum {buffer.flatten()[:3]}, expected {momentum_after(n)}"
        )
    processed = saved["state"]["handlers"]["sampler"]["processed_indices"]
    assert state.sampler.processed_indices == processed, (
        f"rank {rank}: sampler's record differs from the file's"
    )
    remaining = set(range(DATASET_SIZE)) - processed
    partitions = hvd.allgather_object(list(state.sampler.indices))
    assert set().union(*partitions) == remaining, f"rank {rank}: the ranks' partitions are not what is left"
    assert all(len(p) == len(partitions[0]) for p in partitions) and state.sampler.num_replicas == size
    assert resets == [size], f"rank {rank}: reset callbacks ran {resets}, expected once at size {size}"


def main() -> int:
    scenario = sys.argv[1]
    hvd.init()
    rank = hvd.rank()
    hosts = []  # rank -> host, from the placement "a:2,b:1"
    for entry in os.environ["ACCORD_ELASTIC_HOSTS"].split(","):
        name, count = entry.rsplit(":", 1)
        hosts += [name] * int(count)
    host = hosts[rank]
    writer = hosts.index(host) == rank
    state = make_state(rank)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state: TorchState) -> int:
        if scenario == "resume":
            check_restored(state, resets)
        steps = int(sys.argv[2]) if scenario == "train" else {"until-reset": 50}.get(scenario, 1)
        for batch in range(steps):
            train_step(state, batch)
            commit(state, rank, host, writer)
        if scenario == "error":
            raise ValueError(f"bad batch on rank {rank}")
        if scenario == "failure":
            raise hvd.HorovodInternalError(f"peer lost, seen by rank {rank}")
        if scenario == "until-reset":
            raise AssertionError("the hosts changed but no commit raised HostsUpdatedInterrupt")
        time.sleep(0.6)  # a few beats while the training thread sleeps
        return state.step

    result = train(state)
    print(f"RETURNED rank={rank} step={result}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
