"""MNIST-style training with accord.torch, a DistributedSampler, and no downloads.

The script makes its dataset on the spot: 28x28 grey images of ten classes,
each class a smooth random shape drawn at a random offset, brightness and
noise level -- the same dataset on every rank, as every rank would read the
same MNIST files. A ``DistributedSampler`` gives each rank its own share of
every epoch; the test set is split the same way and the metrics are averaged
across ranks with ``allreduce``. Start it with::

    accordrun -np 2 python examples/pytorch_mnist_like.py

Rank 0 prints the training loss as it goes and the test loss and accuracy
after every epoch.
"""

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import accord.torch as hvd


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    parser.add_argument("--batch-size", type=int, default=64, help="training batch per rank (default 64)")
    parser.add_argument("--test-batch-size", type=int, default=500, help="test batch per rank (default 500)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one rank (default 0.01)")
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum (default 0.5)")
    parser.add_argument("--train-size", type=int, default=6000, help="training images (default 6000)")
    parser.add_argument("--test-size", type=int, default=1000, help="test images (default 1000)")
    parser.add_argument(
        "--log-interval", type=int, default=20, help="batches between loss lines (default 20)"
    )
    parser.add_argument(
        "--fp16-allreduce", action="store_true", help="compress gradients to fp16 for the allreduce"
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the data and the model (default 42)")
    args = parser.parse_args()
    if min(args.epochs, args.batch_size, args.test_batch_size, args.train_size, args.test_size) < 1:
        parser.error("--epochs, the batch sizes and the dataset sizes must be at least 1")
    return args


def make_dataset(count: int, seed: int) -> TensorDataset:
    """``count`` labelled 1x28x28 images, normalised like MNIST; the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    # One smooth 20x20 shape per class (the class prototypes are fixed by seed 0).
    coarse = torch.randn(10, 1, 5, 5, generator=torch.Generator().manual_seed(0))
    shapes = F.interpolate(coarse, size=(20, 20), mode="bilinear", align_corners=False).relu()
    labels = torch.randint(0, 10, (count,), generator=generator)
    images = torch.zeros(count, 1, 28, 28)
    offsets = torch.randint(0, 9, (count, 2), generator=generator)
    brightness = 0.6 + 0.8 * torch.rand(count, generator=generator)
    for i in range(count):
        y, x = offsets[i].tolist()
        images[i, :, y : y + 20, x : x + 20] = brightness[i] * shapes[labels[i]]
    images += 0.3 * torch.randn(images.shape, generator=generator)
    images = (images - images.mean()) / images.std()
    return TensorDataset(images, labels)


class Net(nn.Module):
    """A LeNet-style network: two convolutions with pooling, then two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(value: float, name: str) -> float:
    """The mean of ``value`` over all ranks."""
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main() -> int:
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(args.seed)

    train_set = make_dataset(args.train_size, args.seed)
    test_set = make_dataset(args.test_size, args.seed + 1)
    train_sampler = DistributedSampler(train_set, num_replicas=size, rank=rank)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=size, rank=rank, shuffle=False)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # More ranks, bigger effective batch: scale the learning rate with them.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )

    if rank == 0:
        print(
            f"{args.train_size} training and {args.test_size} test images on {size} rank(s): "
            f"{len(train_sampler)} training images per rank per epoch",
            flush=True,
        )
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)  # a different shuffle every epoch, agreed by all ranks
        for batch, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch % args.log_interval == 0 and rank == 0:
                seen = batch * len(data)
                print(
                    f"epoch {epoch} [{seen:5d}/{len(train_sampler)}]  training loss {loss.item():.4f}",
                    flush=True,
                )

        model.eval()
        test_loss = 0.0
        correct = 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(dim=1).eq(target).sum().item()
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if rank == 0:
            print(
                f"epoch {epoch}: test loss {test_loss:.4f}, test accuracy {100 * accuracy:.2f}%", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
