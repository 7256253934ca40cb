"""A deterministic elastic training job for the elastic tests on the bed (test_elastic.py).

Usage: elastic_train.py --log-dir DIR [--output FILE] [--epochs N] [--samples N]
                        [--batch-size B] [--commit-every K] [--step-seconds S]

A linear model learns a fixed synthetic regression (``--samples`` points of 8
features, the same on every run) with SGD and momentum through accord's
DistributedOptimizer, under ``hvd.elastic.run``. The state (model, optimizer,
an ElasticSampler without shuffling, epoch, batch) is committed every
``--commit-every`` batches and at the end of each epoch. Without shuffling, a
generation that starts from a commit with as many ranks as before is handed
the same batches the job without a reset would have run next, so its final
model is the same: the tests compare them.

An ElasticSampler pads what is left of an epoch to a multiple of the ranks by
repeating its first samples; those repeats are left out of the loss and of
the log, so that every sample counts exactly once per epoch whatever the
number of ranks.

Environment:
    ACCORD_TEST_ELASTIC_PROGRESS  a file rank 0 rewrites with the commit count
                                  at every commit (elastic_discovery.py reads it)
    ACCORD_TEST_ELASTIC_FAULT     a fault to inject (below); none when unset
    ACCORD_ELASTIC_GENERATION, ACCORD_ELASTIC_HOSTS   set by accordrun

A fault is ``<kind>:<key>=<value>:...``, injected in the first step after
commit ``commit=N`` (after the forward pass, so the other ranks wait in the
step's allreduce), in generation 0 only unless ``gen=G`` names another or
``gen=any`` asks for every generation:
    kill:rank=R:commit=N       rank R ends itself with SIGKILL (a crash, the OOM killer)
    stop:rank=R:commit=N       rank R stops itself with SIGSTOP (a frozen process)
    killhost:host=H:commit=N   every rank on host H ends itself with SIGKILL

Each rank writes ``<log-dir>/g<generation>-r<rank>.jsonl``, one JSON object a
line, flushed at once (a killed rank's log holds all it did); besides the
fields below every record has ``time`` (Unix time):
    {"event": "start", "generation", "rank", "size", "host", "hosts", "spill", "commit", "epoch"}
        when the training function begins; ``commit``: the commit it starts from,
        ``spill``: ACCORD_ELASTIC_SPILL_DIR
    {"event": "batch", "generation", "rank", "epoch", "commit", "indices"}
        a batch processed; ``commit``: the commit that will hold it, if one does
    {"event": "saved", "generation", "rank", "commit"}
        within a commit, once the state is saved (and, in elastic mode,
        spilled), before its check of the hosts: a host lost now fails that
        check or ends this rank in it, and the driver may restore this commit
    {"event": "commit", "generation", "rank", "commit", "outcome"}
        after a commit: ``ok``, ``hosts`` (it raised HostsUpdatedInterrupt:
        written, then the generation ends) or ``failure`` (HorovodInternalError)
    {"event": "fault", "generation", "rank", "kind", "commit"}   just before a fault
    {"event": "reset", "generation", "rank", "size"}   from the reset callback
    {"event": "done", "generation", "rank", "commit", "epoch"}   the function returned
Rank 0 then writes the final parameters (a dict of tensors, torch.save) to
``--output``.
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

import accord.torch as hvd

FEATURES = 8


class Fault:
    """The fault asked for by ACCORD_TEST_ELASTIC_FAULT, and whether this rank injects it."""

    KINDS = ("kill", "stop", "killhost")

    def __init__(self, spec: str):
        kind, *fields = spec.split(":")
        if kind not in self.KINDS:
            raise ValueError(f"ACCORD_TEST_ELASTIC_FAULT={spec!r}: the kind must be one of {self.KINDS}")
        values: Dict[str, str] = {}
        for field in fields:
            key, sep, value = field.partition("=")
            if not sep:
                raise ValueError(f"ACCORD_TEST_ELASTIC_FAULT={spec!r}: '{field}' is not key=value")
            values[key] = value
        needed = ("host", "commit") if kind == "killhost" else ("rank", "commit")
        missing = [key for key in needed if key not in values]
        if missing:
            raise ValueError(f"ACCORD_TEST_ELASTIC_FAULT={spec!r}: {kind} needs {', '.join(missing)}")
        self.kind = kind
        self.rank = int(values.get("rank", -1))
        self.host = values.get("host", "")
        self.commit = int(values["commit"])
        self.generation = values.get("gen", "0")
        self.injected = False

    def applies(self, generation: int, rank: int, host: str, commit: int) -> bool:
        if self.injected:
            return False
        if self.generation != "any" and int(self.generation) != generation:
            return False
        if commit != self.commit:
            return False
        return host == self.host if self.kind == "killhost" else rank == self.rank

    def inject(self) -> None:
        self.injected = True  # a stopped rank that is let go on does not stop again
        os.kill(os.getpid(), signal.SIGSTOP if self.kind == "stop" else signal.SIGKILL)


def host_of(rank: int, placement: str) -> str:
    """The host of ``rank`` in ACCORD_ELASTIC_HOSTS's placement (``h1:2,h2:1``: ranks 0-1 on h1)."""
    first = 0
    for entry in placement.split(","):
        host, _, slots = entry.rpartition(":")
        first += int(slots)
        if rank < first:
            return host
    raise ValueError(f"rank {rank} is beyond the placement {placement!r}")


class Log:
    """This rank's JSON-lines log; every record carries the generation and the rank."""

    def __init__(self, directory: Path, generation: int, rank: int):
        directory.mkdir(parents=True, exist_ok=True)
        self.generation = generation
        self.rank = rank
        self.file = open(directory / f"g{generation}-r{rank}.jsonl", "a", buffering=1)

    def write(self, event: str, **fields) -> None:
        record = {
            "event": event,
            "generation": self.generation,
            "rank": self.rank,
            "time": time.time(),
            **fields,
        }
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


def write_progress(path: Optional[str], commits: int) -> None:
    """Rewrites the progress file in one step (elastic_discovery.py may read it at any moment)."""
    if not path:
        return
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as f:
        f.write(f"{commits}\n")
    os.replace(temporary, path)


def dataset(samples: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, FEATURES, generator=generator)
    weights = torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1)
    y = x @ weights + 0.1 * torch.randn(samples, 1, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


def real_samples(sampler: hvd.elastic.ElasticSampler) -> int:
    """How many of this rank's samples this epoch are not the sampler's padding.

    The sampler deals out what is left, padded to a multiple of the ranks,
    position by position (rank r gets positions r, r + size, ...); positions
    past what is left are the padding.
    """
    left = len(sampler.remaining_indices)
    return len(range(sampler.rank, left, sampler.num_replicas))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--output", type=Path, default=None, help="rank 0 writes the final parameters here")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--commit-every", type=int, default=2)
    parser.add_argument(
        "--step-seconds", type=float, default=0.1, help="a sleep per step, so that faults land"
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    hvd.init()
    generation = int(os.environ.get("ACCORD_ELASTIC_GENERATION", "0"))
    placement = os.environ.get("ACCORD_ELASTIC_HOSTS", "")
    progress_path = os.environ.get("ACCORD_TEST_ELASTIC_PROGRESS")
    fault_spec = os.environ.get("ACCORD_TEST_ELASTIC_FAULT", "")
    fault = Fault(fault_spec) if fault_spec else None
    log = Log(args.log_dir, generation, hvd.rank())
    host = host_of(hvd.rank(), placement) if placement else os.uname().nodename

    data = dataset(args.samples)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=False)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: log.write("reset", size=hvd.size())])

    check_host_updates = state.check_host_updates

    def check_host_updates_after_saving() -> None:
        # commit() calls it once the state is saved and spilled; commit_count
        # is then the commit just saved (and the newest saved at any call).
        log.write("saved", commit=state.commit_count)
        check_host_updates()

    state.check_host_updates = check_host_updates_after_saving

    def commit() -> None:
        outcome = "ok"
        try:
            state.commit()
        except hvd.elastic.HostsUpdatedInterrupt:
            outcome = "hosts"
            raise
        except hvd.elastic.HorovodInternalError:
            outcome = "failure"
            raise
        finally:
            log.write("commit", commit=state.commit_count, outcome=outcome)
            if hvd.rank() == 0 and outcome != "failure":
                write_progress(progress_path, state.commit_count)

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        log.write(
            "start",
            size=hvd.size(),
            host=host,
            hosts=placement,
            spill=os.environ.get("ACCORD_ELASTIC_SPILL_DIR", ""),
            commit=state.commit_count,
            epoch=state.epoch,
        )
        while state.epoch < args.epochs:
            order: List[int] = list(state.sampler)  # this rank's part of what is left of the epoch
            real = real_samples(state.sampler)
            for batch_idx, start in enumerate(range(0, len(order), args.batch_size)):
                state.batch = batch_idx
                indices = order[start : start + args.batch_size]
                counted = [k < real for k in range(start, start + len(indices))]
                x, y = data[indices]
                mask = torch.tensor(counted, dtype=x.dtype).unsqueeze(1)
                loss = ((state.model(x) - y).pow(2) * mask).sum() / args.batch_size
                if fault is not None and fault.applies(generation, hvd.rank(), host, state.commit_count):
                    log.write("fault", kind=fault.kind, commit=state.commit_count)
                    fault.inject()
                state.optimizer.zero_grad()
                loss.backward()
                state.optimizer.step()
                state.sampler.record_batch(batch_idx, args.batch_size)
                log.write(
                    "batch",
                    epoch=state.epoch,
                    commit=state.commit_count + 1,
                    indices=[i for i, c in zip(indices, counted) if c],
                )
                time.sleep(args.step_seconds)
                if (batch_idx + 1) % args.commit_every == 0:
                    commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.batch = 0
            commit()

    train(state)
    log.write("done", commit=state.commit_count, epoch=state.epoch)
    if hvd.rank() == 0 and args.output is not None:
        parameters = {name: value.detach().clone() for name, value in model.state_dict().items()}
        torch.save(parameters, args.output)
        print(
            f"TRAINED {hvd.size()} rank(s), {state.commit_count} commits, generation {generation}", flush=True
        )
    hvd.shutdown()


if __name__ == "__main__":
    main()
