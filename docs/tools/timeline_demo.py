#!/usr/bin/env python3
"""A short job whose timeline shows every phase: run it on 2 ranks with
ACCORD_TIMELINE set (see docs/troubleshooting.md, "Timeline").

Each step reduces a "loss" alone (a batch of one tensor: NEGOTIATE, QUEUE,
COLLECTIVE), then six "gradients" enqueued together and a group of three
(fused batches: NEGOTIATE, QUEUE, PACK, COLLECTIVE, UNPACK), and checks every
result against the sum of all ranks' inputs.
"""

import sys

import numpy as np

import accord

GRADIENTS = [(1024, 512), (512,), (512, 256), (256,), (1024, 128), (128,)]
GROUP = [(256, 256), (16384,), (64,)]


def main(steps: int = 6) -> int:
    accord.init()
    rank, size = accord.rank(), accord.size()
    total = size * (size + 1) / 2  # sum over ranks of (rank + 1)
    for step in range(steps):
        loss = accord.allreduce(np.full(1, rank + 1.0, np.float32), op=accord.Sum, name="loss")
        handles = [
            accord.allreduce_async(np.full(shape, rank + 1.0, np.float32), op=accord.Sum, name=f"grad.{i}")
            for i, shape in enumerate(GRADIENTS)
        ]
        results = [accord.synchronize(h) for h in handles]
        results += accord.grouped_allreduce(
            [np.full(s, rank + 1.0, np.float32) for s in GROUP], op=accord.Sum, name="layer"
        )
        for out in [loss] + results:
            if not np.all(out == total):
                print(f"rank {rank}: step {step}: expected {total}, got {out.ravel()[:4]}", flush=True)
                return 1
    accord.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
