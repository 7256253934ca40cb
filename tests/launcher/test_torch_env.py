"""accordrun gives every rank torchrun's variables (docs/launcher.md).

RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
MASTER_PORT reach every rank with the right values, so that a script written
for torchrun runs torch.distributed's env:// (gloo) unchanged; the user's own
MASTER_ADDR/MASTER_PORT win; --dry-run shows them.

CTest runs each test on its own (tests/launcher/CMakeLists.txt, label
`launcher`) with ACCORDRUN, the accordrun binary under test, and
ACCORD_TEST_PYTHON, an interpreter with torch (for the gloo test).
"""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from rank_variables import show

HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
RUN_TIMEOUT = 90

pytestmark = pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)")

TORCH_NAMES = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
]


def without_torch_variables(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This environment without torchrun's variables (so accordrun sets them), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in TORCH_NAMES}
    env.update(extra or {})
    return env


def run(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ACCORDRUN, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def reports(result: subprocess.CompletedProcess) -> List[Dict[str, object]]:
    found = [
        json.loads(line.split(" ", 1)[1])
        for line in result.stdout.splitlines()
        if line.startswith("TORCH_ENV ")
    ]
    return sorted(found, key=lambda r: int(r["env"]["RANK"] or -1))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("np_", [2, 3])
def test_every_rank_gets_torchruns_variables(np_: int) -> None:
    env = without_torch_variables({"OMPI_MCA_rmaps_base_oversubscribe": "1"})
    result = run("-np", str(np_), PYTHON, str(HERE / "torch_env.py"), env=env)
    assert result.returncode == 0, show(result)
    got = reports(result)
    assert [r["env"]["RANK"] for r in got] == [str(r) for r in range(np_)], show(result)
    for report in got:
        rank = report["env"]["RANK"]
        expected = {
            "WORLD_SIZE": str(np_),
            "LOCAL_RANK": rank,
            "LOCAL_WORLD_SIZE": str(np_),
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
        }
        for name, value in expected.items():
            assert report["env"][name] == value, (
                f"rank {rank}: {name}={report['env'][name]!r}, expected {value!r}"
            )
    ports = {r["env"]["MASTER_PORT"] for r in got}
    assert len(ports) == 1, f"MASTER_PORT differs between ranks: {ports}\n{show(result)}"
    port = ports.pop()
    assert port is not None and 0 < int(port) < 65536, show(result)
    assert got[0]["port_free"] is True, f"MASTER_PORT {port} was not free on rank 0's host\n{show(result)}"
    # The agents keep their own variable to themselves.
    assert "ACCORDRUN_HOST_RANKS" not in result.stdout


def test_gloo_all_reduce_with_env_init() -> None:
    result = run("-np", "2", PYTHON, str(HERE / "torch_env.py"), "--gloo", env=without_torch_variables())
    assert result.returncode == 0, show(result)
    got = reports(result)
    assert len(got) == 2, show(result)
    for rank, report in enumerate(got):
        assert report["torch_rank"] == rank, show(result)
        assert report["torch_size"] == 2, show(result)
        assert report["sum"] == 3.0, f"rank {rank}: all_reduce of rank + 1 gave {report['sum']}, expected 3"


def test_users_master_port_and_addr_win() -> None:
    port = str(free_port())
    env = without_torch_variables({"MASTER_PORT": port})
    result = run(
        "-np", "2", "-x", "MASTER_ADDR=localhost", PYTHON, str(HERE / "torch_env.py"), "--gloo", env=env
    )
    assert result.returncode == 0, show(result)
    got = reports(result)
    assert len(got) == 2, show(result)
    for report in got:
        assert report["env"]["MASTER_PORT"] == port, show(result)
        assert report["env"]["MASTER_ADDR"] == "localhost", show(result)
        assert report["sum"] == 3.0, show(result)


def test_dry_run_shows_torchruns_variables() -> None:
    result = run("--dry-run", "-np", "2", PYTHON, str(HERE / "torch_env.py"), env=without_torch_variables())
    assert result.returncode == 0, show(result)
    lines = re.findall(r"^accordrun: torch\.distributed: (.*)$", result.stderr, re.M)
    assert len(lines) == 2, show(result)
    assert lines[0] == (
        f"MASTER_ADDR=127.0.0.1 MASTER_PORT=<a free port of {lines[1].split(':')[0]}, chosen at launch> "
        "WORLD_SIZE=2"
    ), show(result)
    assert re.fullmatch(r"\S+: RANK=0-1 LOCAL_RANK=0-1 LOCAL_WORLD_SIZE=2 GROUP_RANK=0", lines[1]), show(
        result
    )
    # The user's value is shown as set.
    result = run("--dry-run", "-np", "2", "true", env=without_torch_variables({"MASTER_PORT": "29555"}))
    assert "MASTER_PORT=29555 (as set)" in result.stderr, show(result)
