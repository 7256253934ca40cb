"""A small data-parallel training loop for the multi-host tests.

Usage: train_steps.py STEPS [--kill-rank R --kill-step S]

Every rank trains an MLP with accord.torch's DistributedOptimizer on its own
seeded data and rank 0 prints ``step N`` after each step. With --kill-rank,
rank R ends itself with SIGKILL (as the kernel's OOM killer or a crash
would) at step S. After the last step every rank checks that its parameters
equal rank 0's and prints ``TRAINED <host> <rank>``.
"""

import argparse
import os
import signal
import socket

import torch

import accord.torch as hvd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-step", type=int, default=-1)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    generator = torch.Generator().manual_seed(100 + hvd.rank())
    for step in range(1, args.steps + 1):
        if hvd.rank() == args.kill_rank and step == args.kill_step:
            print(f"rank {hvd.rank()} on {socket.gethostname()} kills itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(64, 256, generator=generator)
        loss = (model(x) - x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if hvd.rank() == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    reference = hvd.broadcast(flat, root_rank=0, name="final_parameters")
    assert torch.equal(flat, reference), f"rank {hvd.rank()}: parameters differ from rank 0's"
    print(f"TRAINED {socket.gethostname()} {hvd.rank()}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
