"""Elastic data-parallel training with accord.torch: the job goes on when hosts come and go.

Written as a Horovod elastic script is written: the training function is
decorated with ``hvd.elastic.run`` and keeps its progress in a ``TorchState``
(model, optimizer, sampler, epoch, batch) that it commits every few batches.
Start it under accordrun's elastic mode with a script that prints the hosts
that may run ranks now, one ``host:slots`` per line::

    accordrun --min-np 1 --max-np 4 --host-discovery-script examples/discover_hosts.sh \\
        python examples/pytorch_elastic.py

When a host is added or removed, every rank stops at its next commit and
accordrun starts the ranks anew on the hosts there are now, from that commit;
when a rank fails, from the last commit before it. The ``ElasticSampler``
hands the new ranks only the samples of the epoch not yet trained on, and the
reset callback scales the learning rate to the new number of ranks. Without
the elastic flags (``accordrun -np 2 python examples/pytorch_elastic.py``) it
trains as any data-parallel script does.

The data are synthetic: 32 features, each of 10 classes a fixed random
pattern plus noise, so the accuracy climbs within an epoch or two. At the end
rank 0 prints the accuracy on held-out samples, every rank checks that its
parameters equal rank 0's, and the script exits with status 1 if they do not
or if the model learned nothing.
"""

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import accord.torch as hvd

FEATURES = 32
CLASSES = 10


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    parser.add_argument("--train-size", type=int, default=4096, help="training samples (default 4096)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate for one rank (default 0.05)")
    parser.add_argument(
        "--batches-per-commit", type=int, default=10, help="batches between two commits (default 10)"
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the data and the model (default 42)")
    args = parser.parse_args()
    if min(args.epochs, args.train_size, args.batch_size, args.batches_per_commit) < 1:
        parser.error("--epochs, --train-size, --batch-size and --batches-per-commit must be at least 1")
    return args


def synthetic_data(samples: int, seed: int) -> torch.utils.data.TensorDataset:
    """``samples`` points: each a random class's pattern (the same for every seed's data) plus noise."""
    patterns = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    features = patterns[labels] + 1.5 * torch.randn(samples, FEATURES, generator=generator)
    return torch.utils.data.TensorDataset(features, labels)


def main() -> int:
    args = parse_args()
    hvd.init()

    train_set = synthetic_data(args.train_size, seed=args.seed)
    test_set = synthetic_data(1024, seed=args.seed + 1)

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    # The sampler gives each rank its share of what is left of the epoch; the
    # state holds everything a new set of ranks needs to go on.
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    def on_reset() -> None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"reset: now {hvd.size()} rank(s), epoch {state.epoch}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.epoch < args.epochs:
            loss = None
            for state.batch, (features, labels) in enumerate(loader):
                state.optimizer.zero_grad()
                loss = F.cross_entropy(state.model(features), labels)
                loss.backward()
                state.optimizer.step()
                state.sampler.record_batch(state.batch, args.batch_size)
                if (state.batch + 1) % args.batches_per_commit == 0:
                    state.commit()  # raises on every rank together if the hosts changed
            if hvd.rank() == 0 and loss is not None:
                print(f"epoch {state.epoch + 1}/{args.epochs} on {hvd.size()} rank(s): last loss {loss:.4f}")
            # The next epoch starts in the committed state, so that a reset from
            # here does not train on this epoch again.
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.batch = 0
            state.commit()

    train(state)

    # Every rank must hold the same parameters: compare with rank 0's.
    worst = torch.zeros(1)
    for name, param in model.named_parameters():
        reference = hvd.broadcast(param.detach(), root_rank=0, name=f"check.{name}")
        worst = torch.maximum(worst, (param.detach() - reference).abs().max().reshape(1))
    worst = hvd.allreduce(worst, op=hvd.Max, name="check.worst").item()

    with torch.no_grad():
        features, labels = test_set.tensors
        accuracy = (model(features).argmax(dim=1) == labels).float().mean().item() * 100
    if hvd.rank() == 0:
        print(f"test accuracy {accuracy:.1f}% after {args.epochs} epoch(s) on {hvd.size()} rank(s)")
        if worst != 0.0:
            print(f"ERROR: parameters differ between ranks (largest difference {worst:g})", file=sys.stderr)
        if accuracy < 50.0:
            print(f"ERROR: accuracy {accuracy:.1f}% is too near chance (10%)", file=sys.stderr)
    return 0 if worst == 0.0 and accuracy >= 50.0 else 1


if __name__ == "__main__":
    sys.exit(main())
