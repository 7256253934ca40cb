"""Data-parallel training of a small CNN on synthetic images with accord.torch.

Written as a Horovod user writes a training script: initialise, scale the
learning rate by the number of ranks, wrap the optimizer in
``DistributedOptimizer``, and broadcast the initial state from rank 0. Start
it with the launcher, one process per rank::

    accordrun -np 2 python examples/pytorch_synthetic.py

Every rank draws its own batches of 28x28 images: each image is one of ten
fixed random patterns plus noise, labelled with the pattern's index, so the
loss falls within a few dozen steps. Rank 0 prints the loss (averaged over
the ranks) and the throughput of every step; at the end every rank checks
that its parameters equal rank 0's, and the script exits with status 1 if
they do not.
"""

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import accord.torch as hvd


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per rank per step (default 64)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one rank (default 0.01)")
    parser.add_argument("--noise", type=float, default=1.5, help="noise added to the patterns (default 1.5)")
    parser.add_argument(
        "--warmup-steps", type=int, default=3, help="steps left out of the mean throughput (default 3)"
    )
    parser.add_argument(
        "--fp16-allreduce", action="store_true", help="compress gradients to fp16 for the allreduce"
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="seed of the patterns and the model (default 42)"
    )
    args = parser.parse_args()
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be at least 1")
    return args


class SmallCNN(nn.Module):
    """Two convolutions and two linear layers, for 1x28x28 images and 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main() -> int:
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # The same patterns on every rank; each rank its own stream of samples.
    torch.manual_seed(args.seed)
    patterns = torch.randn(10, 1, 28, 28)
    samples = torch.Generator().manual_seed(args.seed * 1000 + rank)

    def next_batch():
        labels = torch.randint(0, 10, (args.batch_size,), generator=samples)
        noise = torch.randn(args.batch_size, 1, 28, 28, generator=samples)
        return patterns[labels] + args.noise * noise, labels

    # Rank-dependent initial weights show that broadcast_parameters matters.
    torch.manual_seed(args.seed + rank)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    if rank == 0:
        print(
            f"training SmallCNN on {size} rank(s), {args.batch_size} images per rank per step, "
            f"{torch.get_num_threads()} thread(s) per rank",
            flush=True,
        )
    losses, rates = [], []
    for step in range(1, args.steps + 1):
        images, labels = next_batch()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        # The mean over the ranks, for the printout only.
        mean_loss = hvd.allreduce(loss.detach(), name="mean_loss").item()
        losses.append(mean_loss)
        rate = args.batch_size * size / elapsed
        if step > args.warmup_steps:
            rates.append(rate)
        if rank == 0:
            print(
                f"step {step:4d}/{args.steps}  loss {mean_loss:.4f}  {rate:9.1f} images/s "
                f"({rate / size:.1f} per rank)",
                flush=True,
            )

    # Every rank must hold the same parameters: compare with rank 0's.
    worst = torch.zeros(1)
    for name, param in model.named_parameters():
        reference = hvd.broadcast(param.detach(), root_rank=0, name=f"check.{name}")
        worst = torch.maximum(worst, (param.detach() - reference).abs().max().reshape(1))
    worst = hvd.allreduce(worst, op=hvd.Max, name="check.worst").item()

    if rank == 0:
        mean_rate = sum(rates) / len(rates) if rates else rate
        print(
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {args.steps} steps; "
            f"{mean_rate:.1f} images/s on {size} rank(s) ({mean_rate / size:.1f} per rank)"
        )
        if worst == 0.0:
            print(f"parameters identical on all {size} rank(s)")
        else:
            print(f"ERROR: parameters differ between ranks (largest difference {worst:g})", file=sys.stderr)
    return 0 if worst == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
