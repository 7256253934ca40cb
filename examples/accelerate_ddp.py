"""Hugging Face Accelerate on CPUs over accord's ``torch.distributed`` backend.

Importing ``accord.torch`` registers accord as a ``torch.distributed`` backend
(frameworks/torch/python/process_group.py, docs/torch_distributed.md). The
script makes accord's process group the default one, then lets an
``Accelerator(cpu=True)`` prepare the model (DistributedDataParallel, which
averages the gradients with accord), the optimizer and the data loader (one
shard of the batches per process)::

    accordrun -np 2 python examples/accelerate_ddp.py

accordrun gives every rank torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), from which both
``init_process_group("accord")`` and Accelerate take the ranks. It needs torch
2.1 or newer and ``pip install accelerate``; without them it says so and exits
with status 77 (CTest's "skipped").

Why not ``Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend=
"accord")])``: on CPUs Accelerate (1.15) picks the backend itself, "mpi" where
torch was built with MPI and "gloo" otherwise, and refuses any other
("Your assigned backend accord is not available, please use gloo"). It uses a
process group that is already there, though, and only calls it "gloo"
(``accelerator.state.backend``; its ``gather`` then takes the path that works
with every backend). On GPUs the handler's backend is taken as given:
``InitProcessGroupKwargs(backend="accord")`` works there.

The model is a small MLP classifying synthetic data (each of 4 classes a fixed
random pattern of 16 features plus noise). At the end every process checks,
with ``accelerator.gather``, that the processes were given different samples
(each sample to one process only), that their parameters are identical, and
that the loss over the whole data set went down; the main process prints one
line, and the script exits with status 1 if a check fails.
"""

import argparse
import sys

SKIPPED = 77  # CTest's SKIP_RETURN_CODE (examples/CMakeLists.txt)
FEATURES = 16
HIDDEN = 32
CLASSES = 4


def say(message: str) -> None:
    """A line from every rank: a rank that exits first makes mpirun stop the others, so rank 0 alone
    might not get to say it."""
    print(message, flush=True)


def skip_unless_available() -> None:
    """Exit with SKIPPED, saying why, where this Python lacks torch 2.1+ or Accelerate."""
    try:
        import torch
    except ImportError:
        say("accelerate_ddp.py: skipped: torch is not installed")
        sys.exit(SKIPPED)
    from accord.torch.process_group import backend_supported

    if not backend_supported():
        say(
            f"accelerate_ddp.py: skipped: torch {torch.__version__} has no Python backends "
            "(2.1 or newer needed)"
        )
        sys.exit(SKIPPED)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        say("accelerate_ddp.py: skipped: Accelerate is not installed (pip install accelerate)")
        sys.exit(SKIPPED)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    parser.add_argument("--samples", type=int, default=512, help="samples in the data set (default 512)")
    parser.add_argument(
        "--batch-size", type=int, default=16, help="samples per process per step (default 16)"
    )
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the data and the model (default 42)")
    args = parser.parse_args()
    if min(args.epochs, args.samples, args.batch_size) < 1:
        parser.error("--epochs, --samples and --batch-size must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    skip_unless_available()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, set_seed

    import accord.torch  # noqa: F401 -- registers the torch.distributed backend "accord"

    torch.set_num_threads(1)
    dist.init_process_group("accord")  # env://: accordrun's RANK, WORLD_SIZE, MASTER_ADDR/PORT
    accelerator = Accelerator(cpu=True)
    world_size = accelerator.num_processes
    if args.samples % (args.batch_size * world_size):
        if accelerator.is_main_process:
            print(
                f"accelerate_ddp.py: --samples ({args.samples}) must be a multiple of --batch-size x "
                f"processes ({args.batch_size * world_size}) for every sample to go to one process only",
                file=sys.stderr,
            )
        return 2

    # The same data and initial model on every process (DDP also broadcasts
    # the main process's parameters). Each sample carries its index, so that
    # the processes can tell which samples they were given.
    set_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    patterns = torch.randn(CLASSES, FEATURES, generator=generator)
    labels = torch.randint(0, CLASSES, (args.samples,), generator=generator)
    features = patterns[labels] + 0.8 * torch.randn(args.samples, FEATURES, generator=generator)
    dataset = torch.utils.data.TensorDataset(features, labels, torch.arange(args.samples))
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    eval_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    def whole_data_loss() -> float:
        """The mean loss over every sample: each process its shard, the per-sample losses gathered."""
        model.eval()
        losses = []
        with torch.no_grad():
            for x, y, _ in eval_loader:
                losses.append(accelerator.gather(F.cross_entropy(model(x), y, reduction="none")))
        model.train()
        gathered = torch.cat(losses)
        assert gathered.numel() == args.samples, gathered.numel()
        return gathered.mean().item()

    loss_before = whole_data_loss()
    steps = 0
    seen_first_epoch = []
    for epoch in range(args.epochs):
        for x, y, index in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            steps += 1
            if epoch == 0:
                seen_first_epoch.append(index)
    loss_after = whole_data_loss()

    failures = []
    if dist.get_backend() != "accord":
        failures.append(f"the process group's backend is {dist.get_backend()}, not accord")
    if accelerator.distributed_type != DistributedType.MULTI_CPU or world_size != dist.get_world_size():
        failures.append(f"Accelerate runs {accelerator.distributed_type} with {world_size} processes")
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        failures.append(f"the prepared model is a {type(model).__name__}, not DistributedDataParallel")
    # The shards: every process's samples of the first epoch, gathered; each
    # sample went to one process only, and every sample to one.
    mine = torch.cat(seen_first_epoch)
    shards = accelerator.gather(mine).view(world_size, -1)
    distinct = len(set(shards.reshape(-1).tolist()))
    if world_size > 1 and torch.equal(shards[0], shards[1]):
        failures.append("processes 0 and 1 were given the same samples")
    if distinct != args.samples or shards.numel() != args.samples:
        failures.append(
            f"{shards.numel()} samples given out in the first epoch, {distinct} distinct, of {args.samples}"
        )
    # The parameters: every process's, gathered, equal the main process's.
    flat = torch.cat([p.detach().reshape(-1) for p in accelerator.unwrap_model(model).parameters()])
    everyones = accelerator.gather(flat).view(world_size, -1)
    differing = [r for r in range(world_size) if not torch.equal(everyones[r], everyones[0])]
    if differing:
        failures.append(f"the parameters of processes {differing} differ from process 0's")
    if not loss_after < 0.5 * loss_before:
        failures.append(f"the loss did not go down enough ({loss_before:.4f} -> {loss_after:.4f})")
    for failure in failures:
        print(
            f"accelerate_ddp.py: process {accelerator.process_index}: {failure}", file=sys.stderr, flush=True
        )
    if accelerator.is_main_process and not failures:
        print(
            f"accelerate_ddp.py: {world_size} processes ({accelerator.distributed_type.value}, "
            f"process group {dist.get_backend()}), {steps} steps: loss {loss_before:.4f} -> "
            f"{loss_after:.4f} (gathered over {args.samples} samples), disjoint shards of "
            f"{shards.shape[1]} samples, parameters identical on every process",
            flush=True,
        )
    accelerator.end_training()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
