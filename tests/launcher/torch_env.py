"""Run by the launcher tests under accordrun: every rank prints torchrun's variables.

Each rank prints one line ``TORCH_ENV <json>`` with the seven variables that
torch.distributed's env:// reads (or that torchrun sets), its host name, and
on the rank with RANK 0 whether MASTER_PORT could be bound on its host
(accordrun chose it free). With ``--gloo`` it also initialises
torch.distributed with the gloo backend and env://, all-reduces ``rank + 1``
and reports the sum.
"""

import json
import os
import socket
import sys
from typing import Dict, Optional

NAMES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"]


def port_free(port: str) -> Optional[bool]:
    """Whether ``port`` can be bound on every interface of this host now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", int(port)))
        except (OSError, ValueError):
            return False
    return True


def main() -> None:
    env: Dict[str, Optional[str]] = {name: os.environ.get(name) for name in NAMES}
    report: Dict[str, object] = {"env": env, "hostname": socket.gethostname()}
    if env["RANK"] == "0" and env["MASTER_PORT"] is not None:
        report["port_free"] = port_free(env["MASTER_PORT"])
    if "--gloo" in sys.argv[1:]:
        import torch
        import torch.distributed as dist

        dist.init_process_group(backend="gloo", init_method="env://")
        value = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(value)
        report["sum"] = float(value.item())
        report["torch_rank"] = dist.get_rank()
        report["torch_size"] = dist.get_world_size()
        dist.destroy_process_group()
    # One write for the whole line, so that mpirun cannot interleave it with
    # another rank's output.
    os.write(sys.stdout.fileno(), ("TORCH_ENV " + json.dumps(report, sort_keys=True) + "\n").encode())


if __name__ == "__main__":
    main()
