"""PyTorch Lightning's DDP over accord: ``DDPStrategy(process_group_backend="accord")``.

Importing ``accord.torch`` registers accord as a ``torch.distributed`` backend
(frameworks/torch/python/process_group.py, docs/torch_distributed.md); a
Lightning ``Trainer`` whose DDP strategy names that backend then averages its
gradients with accord. accordrun starts the ranks and gives each torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT), so Lightning starts no processes of its own::

    accordrun -np 2 python examples/pytorch_lightning_ddp.py

(across hosts: ``accordrun -np 4 -H a:2,b:2 python ...``; every host must run
the same number of ranks, as Lightning's ``devices`` is per node). It needs
torch 2.1 or newer and ``pip install pytorch-lightning`` (or ``lightning``,
which installs it too); without them it says so and exits with status 77
(CTest's "skipped").

The model is a small MLP fitted to a synthetic regression (a fixed random
linear map of 16 features plus noise). At the end every rank checks that its
parameters equal rank 0's and that the loss on the whole data set went down;
rank 0 prints one line, and the script exits with status 1 if either check
fails.
"""

import argparse
import logging
import os
import sys
import warnings

SKIPPED = 77  # CTest's SKIP_RETURN_CODE (examples/CMakeLists.txt)
FEATURES = 16
HIDDEN = 32
TORCHRUN_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def say(message: str) -> None:
    """A line from every rank: a rank that exits first makes mpirun stop the others, so rank 0 alone
    might not get to say it."""
    print(message, flush=True)


def skip_unless_available() -> None:
    """Exit with SKIPPED, saying why, where this Python lacks torch 2.1+ or Lightning."""
    try:
        import torch
    except ImportError:
        say("pytorch_lightning_ddp.py: skipped: torch is not installed")
        sys.exit(SKIPPED)
    from accord.torch.process_group import backend_supported

    if not backend_supported():
        say(
            f"pytorch_lightning_ddp.py: skipped: torch {torch.__version__} has no Python backends "
            "(2.1 or newer needed)"
        )
        sys.exit(SKIPPED)
    try:
        import pytorch_lightning  # noqa: F401
    except ImportError:
        say(
            "pytorch_lightning_ddp.py: skipped: PyTorch Lightning is not installed "
            "(pip install pytorch-lightning)"
        )
        sys.exit(SKIPPED)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    parser.add_argument("--samples", type=int, default=1024, help="samples in the data set (default 1024)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default 0.05)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the data and the model (default 42)")
    args = parser.parse_args()
    if min(args.steps, args.samples, args.batch_size) < 1:
        parser.error("--steps, --samples and --batch-size must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    skip_unless_available()
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        print(
            f"pytorch_lightning_ddp.py: {', '.join(missing)} not set: start it with "
            "`accordrun -np 2 python examples/pytorch_lightning_ddp.py`",
            file=sys.stderr,
        )
        return 2

    import pytorch_lightning as pl
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from lightning_fabric.plugins.environments import TorchElasticEnvironment
    from pytorch_lightning.strategies import DDPStrategy

    import accord.torch  # noqa: F401 -- registers the torch.distributed backend "accord"

    # Lightning's lines about the hardware and its hints on data loaders.
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    torch.set_num_threads(1)

    class Regression(pl.LightningModule):
        def __init__(self, lr: float):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
            self.lr = lr

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    # The same data and initial model on every rank (DDP also broadcasts rank
    # 0's parameters); Lightning gives each rank its own shard of the data
    # through a DistributedSampler that it adds to the loader.
    pl.seed_everything(args.seed, verbose=False)
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator) / FEATURES**0.5
    y = x @ w + 0.05 * torch.randn(args.samples, 1, generator=generator)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, num_workers=0
    )
    model = Regression(args.lr)
    with torch.no_grad():
        loss_before = F.mse_loss(model(x), y).item()

    # Which cluster environment: left to itself, Lightning 2.6 looks for
    # TorchElasticEnvironment (it needs TORCHELASTIC_RUN_ID, which only
    # torchrun sets), SLURM, LSF and MPIEnvironment (only with mpi4py
    # installed), and otherwise takes LightningEnvironment, which starts no
    # processes when LOCAL_RANK is set and reads GROUP_RANK and MASTER_ADDR/
    # MASTER_PORT. That works under accordrun too, but mpi4py would change the
    # choice; TorchElasticEnvironment, given here, reads exactly the variables
    # that accordrun sets (ranks from RANK and WORLD_SIZE, not recomputed) and
    # checks that devices x num_nodes is the world size.
    local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])
    world_size = int(os.environ["WORLD_SIZE"])
    environment = TorchElasticEnvironment()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=local_world_size,
        num_nodes=world_size // local_world_size,
        strategy=DDPStrategy(process_group_backend="accord", cluster_environment=environment),
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)

    # Lightning keeps the process group until the process exits.
    rank = dist.get_rank()
    failures = []
    if dist.get_backend() != "accord":
        failures.append(f"the process group's backend is {dist.get_backend()}, not accord")
    if (trainer.global_rank, trainer.world_size) != (int(os.environ["RANK"]), world_size):
        failures.append(f"Lightning's rank {trainer.global_rank} of {trainer.world_size} is not accordrun's")
    with torch.no_grad():
        loss_after = F.mse_loss(model(x), y).item()
        mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        everyones = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(everyones, mine)
    differing = [r for r, theirs in enumerate(everyones) if not torch.equal(theirs, everyones[0])]
    steps = trainer.global_step
    if differing:
        failures.append(f"the parameters of ranks {differing} differ from rank 0's")
    if not loss_after < 0.5 * loss_before:
        failures.append(f"the loss did not go down enough ({loss_before:.4f} -> {loss_after:.4f})")
    if steps != args.steps:
        failures.append(f"{steps} steps instead of {args.steps}")
    for failure in failures:
        print(f"pytorch_lightning_ddp.py: rank {rank}: {failure}", file=sys.stderr, flush=True)
    if rank == 0 and not failures:
        environment_name = type(trainer.strategy.cluster_environment).__name__
        print(
            f"pytorch_lightning_ddp.py: {world_size} ranks ({environment_name}, backend "
            f"{dist.get_backend()}), {steps} steps: loss {loss_before:.4f} -> {loss_after:.4f}, "
            "parameters identical on every rank",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
