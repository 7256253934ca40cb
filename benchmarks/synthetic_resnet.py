"""Horovod-style synthetic benchmark: ResNet-18 training on random images with accord.torch.

The loop of Horovod's ``pytorch_synthetic_benchmark.py``: one fixed random batch per rank, SGD
through ``DistributedOptimizer``, parameters broadcast from rank 0, a few warm-up batches, then
timed iterations of several batches each; rank 0 prints images/s per rank and in total. The model
is ResNet-18 (basic blocks, [2, 2, 2, 2], 1000 classes), written out here so that the benchmark
needs no torchvision. Run it the ways a user would, e.g.::

    accordrun -np 2 python benchmarks/synthetic_resnet.py
    mpirun -np 2 --bind-to none python benchmarks/synthetic_resnet.py
    python benchmarks/synthetic_resnet.py            # one process, no launcher

It prints one line ``SYNTHETIC {json}`` with the figures, the threads torch used and the CPUs
rank 0 may run on.
"""

import argparse
import json
import os
import time
import timeit
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

import accord.torch as hvd


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers: List[nn.Module] = []
        inputs = 64
        for outputs, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1)]
            inputs = outputs
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=16, help="images per rank per batch (default 16)")
    parser.add_argument(
        "--image-size", type=int, default=112, help="height and width (default 112; Horovod: 224)"
    )
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--batches-per-iter", type=int, default=3)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--label", default="", help="copied into the output line")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    model = ResNet18()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))

    def benchmark_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    timeit.timeit(benchmark_step, number=args.warmup_batches)
    rates = []
    for _ in range(args.iters):
        seconds = timeit.timeit(benchmark_step, number=args.batches_per_iter)
        rates.append(args.batch_size * args.batches_per_iter / seconds)
    mean = sum(rates) / len(rates)
    # Every rank's mean, so that the total is what all ranks did.
    total = hvd.allreduce(torch.tensor([mean], dtype=torch.float64), op=hvd.Sum, name="img_sec").item()
    if hvd.rank() == 0:
        print(
            "SYNTHETIC "
            + json.dumps(
                {
                    "label": args.label,
                    "size": hvd.size(),
                    "img_sec_per_rank": round(mean, 2),
                    "img_sec_total": round(total, 2),
                    "torch_threads": torch.get_num_threads(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                    "rank0_cpus": sorted(os.sched_getaffinity(0)),
                    "batch_size": args.batch_size,
                    "image_size": args.image_size,
                    "time": time.strftime("%H:%M:%S"),
                }
            ),
            flush=True,
        )
    hvd.shutdown()


if __name__ == "__main__":
    main()
