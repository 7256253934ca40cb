"""What the ranks' agreement check adds to broadcast_parameters, for a ResNet-50 state dict.

Before it broadcasts, ``broadcast_parameters`` describes every tensor
(name, dtype, shape), hashes the list and runs one small allreduce
(``accord.torch.tensor_agreement``). This times, on ResNet-50's state dict
(320 tensors, 25.6 M parameters; the model is written out below so that no
torchvision is needed), medians over ``--runs`` calls:

* ``check``: describing the state dict and the check, what
  ``broadcast_parameters`` adds when the ranks agree;
* ``allreduce``: a lone 2-element int64 allreduce, the collective inside
  the check, for scale;
* ``broadcast``: the whole ``broadcast_parameters``, check included.

    mpirun -np 2 --bind-to none python3 benchmarks/broadcast_check_bench.py [--runs 200]

Rank 0 prints one line ``BROADCAST_CHECK {json}`` (times in microseconds).
"""

import argparse
import json
import statistics
import time
from typing import Callable, List

import torch
import torch.nn as nn

import accord.torch as hvd
from accord.torch.tensor_agreement import check_same_tensors, describe


class Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        outputs = width * 4
        self.conv1 = nn.Conv2d(inputs, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, outputs, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(outputs)
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )


def resnet50() -> nn.Module:
    """ResNet-50's parameters and buffers (its layers only: nothing here runs forward)."""
    model = nn.Module()
    model.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
    model.bn1 = nn.BatchNorm2d(64)
    inputs = 64
    for index, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
        layer = []
        for block in range(blocks):
            layer.append(Bottleneck(inputs, width, stride if block == 0 else 1))
            inputs = width * 4
        setattr(model, f"layer{index + 1}", nn.Sequential(*layer))
    model.fc = nn.Linear(2048, 1000)
    return model


def median_us(call: Callable[[], None], runs: int) -> float:
    times: List[float] = []
    for _ in range(runs):
        hvd.barrier()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    hvd.init()
    state = resnet50().state_dict()
    parameters = sum(t.numel() for t in state.values())

    def check() -> None:
        described = [describe(name, tensor) for name, tensor in state.items()]
        check_same_tensors("bench", described, "bench.check", hvd.global_process_set)

    pair = torch.zeros(2, dtype=torch.int64)
    figures = {
        "ranks": hvd.size(),
        "tensors": len(state),
        "parameters": parameters,
        "runs": args.runs,
        "check_us": median_us(check, args.runs),
        "allreduce_us": median_us(lambda: hvd.allreduce_(pair, op=hvd.Max, name="bench.pair"), args.runs),
        "broadcast_us": median_us(
            lambda: hvd.broadcast_parameters(state, root_rank=0), max(args.runs // 10, 5)
        ),
    }
    if hvd.rank() == 0:
        print(
            "BROADCAST_CHECK "
            + json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}),
            flush=True,
        )
    hvd.shutdown()


if __name__ == "__main__":
    main()
