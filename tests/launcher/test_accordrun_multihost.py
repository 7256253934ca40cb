"""accordrun across hosts: jobs on the test bed's emulated hosts h1-h3.

The bed (tests/multihost/bed.sh) makes each host a network namespace, and
its rsh agent (tests/multihost/netns-rsh) starts commands there as ssh would
on a real host: own host name, clean environment. So what these tests check
holds for real hosts reached with ssh: ranks are placed and numbered per
host, every variable accordrun sets arrives, each host binds its own ranks,
--output-filename writes every rank's files, and a rank that fails on h2 is
reported with its rank and host.

CTest runs each test on its own (tests/CMakeLists.txt, label `multihost`)
with
    ACCORDRUN             the accordrun binary under test
    ACCORD_TEST_PYTHON    the interpreter the ranks run (it has numpy)
    PYTHONPATH            the staged accord package (accordrun forwards it)
as root with the bed up (the accord_bed fixture). Anyone else, or a machine
without the bed's hosts, skips them. Every job has a timeout.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import rank_variables
from rank_variables import show

HERE = Path(__file__).resolve().parent
BED = HERE.parent / "multihost"
NETNS_RSH = BED / "netns-rsh"
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
SUBNET = os.environ.get("ACCORD_BED_SUBNET", "10.77.0") + ".0/24"
RUN_TIMEOUT = 120
BED_HOSTS = ["h1", "h2", "h3"]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root (network namespaces)"),
    pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)"),
]


@pytest.fixture(autouse=True)
def bed() -> None:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    hosts = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    missing = [h for h in BED_HOSTS if h not in hosts]
    if listed.returncode != 0 or missing:
        pytest.skip(
            f"the bed's hosts {', '.join(missing) or BED_HOSTS} are not up (tests/multihost/bed.sh up 3)"
        )


def accordrun(
    *args: str, env: Optional[Dict[str, str]] = None, timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess:
    """accordrun ARGS with the bed's agent and subnet; .returncode, .stdout, .stderr, .seconds."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    command = [
        ACCORDRUN,
        "--rsh-agent",
        str(NETNS_RSH),
        "--network-interfaces",
        SUBNET,
        "--start-timeout",
        "60",
        *args,
    ]
    start = time.monotonic()
    result = subprocess.run(
        command, env=full_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    result.seconds = time.monotonic() - start
    return result


def expected_layout(hosts: List[Tuple[str, int]], np_: int) -> List[Dict[str, object]]:
    """Rank -> host, local and cross rank and size, when ranks fill the hosts in order."""
    placed: List[Tuple[str, int]] = []  # (host, local rank) per rank
    for name, slots in hosts:
        for local in range(slots):
            if len(placed) < np_:
                placed.append((name, local))
    ranks_on = {name: sum(1 for h, _ in placed if h == name) for name, _ in hosts}
    expected = []
    for host, local in placed:
        # Cross: the ranks with this local rank, one per host, in host order.
        peers = [h for h, other in placed if other == local]
        expected.append(
            {
                "hostname": host,
                "local_rank": local,
                "local_size": ranks_on[host],
                "cross_rank": peers.index(host),
                "cross_size": len(peers),
            }
        )
    return expected


def rank_reports(result: subprocess.CompletedProcess) -> List[Dict[str, object]]:
    reports = [
        json.loads(line.split(" ", 1)[1])
        for line in result.stdout.splitlines()
        if line.startswith("RANK_REPORT ")
    ]
    return sorted(reports, key=lambda r: r["rank"])


# ----------------------------------------------------- ranks on every host

LAYOUTS = {
    "2x2": (["-H", "h1:2,h2:2"], [("h1", 2), ("h2", 2)], 4),
    "3x1": (["-H", "h1,h2,h3"], [("h1", 1), ("h2", 1), ("h3", 1)], 3),
    "2p1": (["-H", "h1:2,h2:1"], [("h1", 2), ("h2", 1)], 3),
    # A hostfile whose order is not the hosts' numbers, and -np below its slots.
    "hostfile": (["--hostfile", "@HOSTFILE@", "-np", "3"], [("h3", 1), ("h1", 2), ("h2", 2)], 3),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ranks_sizes_hosts_and_variables(tmp_path: Path, layout: str) -> None:
    host_args, hosts, np_ = LAYOUTS[layout]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the bed\nh3 slots=1\nh1 slots=2   # two ranks\n\nh2 slots=2\n")
    host_args = [str(hostfile) if a == "@HOSTFILE@" else a for a in host_args]
    # OMP_NUM_THREADS unset so that the agents set it. UNFORWARDED_SETTING is
    # set here but neither forwarded nor one of accord's: the hosts' clean
    # environment (as with ssh) must not have it.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(rank_variables.ENV)
    env["UNFORWARDED_SETTING"] = "stays here"
    result = subprocess.run(
        [
            ACCORDRUN,
            *host_args,
            "--rsh-agent",
            str(NETNS_RSH),
            "--network-interfaces",
            SUBNET,
            *rank_variables.FLAGS,
            PYTHON,
            str(HERE / "rank_report.py"),
            *rank_variables.NAMES,
            "UNFORWARDED_SETTING",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    reports = rank_reports(result)
    assert [r["rank"] for r in reports] == list(range(np_)), show(result)
    layout_of_ranks = expected_layout(hosts, np_)
    for report, want in zip(reports, layout_of_ranks):
        rank = report["rank"]
        got = {key: report[key] for key in want}
        assert got == want, f"rank {rank}: {got}, expected {want}\n{show(result)}"
        assert report["size"] == np_, f"rank {rank}: size {report['size']}"
        assert report["ompi_rank"] == rank, f"rank {rank}: Open MPI says rank {report['ompi_rank']}"
        assert report["rank_sum"] == np_ * (np_ + 1) / 2, f"rank {rank}: sum {report['rank_sum']}"
        # Each host's agents give their ranks OMP_NUM_THREADS = their share of the host's cores.
        rank_variables.check(report, rank_variables.expected_binding(report["local_size"])[1], show(result))
        assert report["env"]["UNFORWARDED_SETTING"] is None, f"rank {rank}: UNFORWARDED_SETTING arrived"
    assert_bound_per_host(reports, result)


def assert_bound_per_host(reports: List[Dict[str, object]], result: subprocess.CompletedProcess) -> None:
    """Each host binds its ranks on its own: local rank i to the i-th share of the host's cores."""
    for report in reports:
        want = rank_variables.expected_binding(report["local_size"])[0][report["local_rank"]]
        assert report["cpus"] == want, (
            f"rank {report['rank']} on {report['hostname']} (local rank "
            f"{report['local_rank']} of {report['local_size']}) may run on CPUs "
            f"{report['cpus']}, expected {want}\n{show(result)}"
        )


def test_a_remote_host_with_more_ranks_than_cores_leaves_its_ranks_unbound() -> None:
    crowded = len(rank_variables.usable_cores()) + 1
    np_ = crowded + 1
    result = accordrun("-H", f"h1:{crowded},h2:1", PYTHON, str(HERE / "rank_report.py"))
    assert result.returncode == 0, show(result)
    reports = rank_reports(result)
    assert [r["rank"] for r in reports] == list(range(np_)), show(result)
    assert [r["hostname"] for r in reports] == ["h1"] * crowded + ["h2"], show(result)
    assert_bound_per_host(reports, result)
    assert (
        f"accordrun: note: {crowded} ranks on the {crowded - 1} core{'s' if crowded > 2 else ''} of h1: "
        "not bound, OMP_NUM_THREADS=1 (more ranks than cores"
    ) in result.stderr, show(result)
    assert "adding --oversubscribe" not in result.stderr, show(result)


# ------------------------------------------- which allreduce runs by default

TWO_LEVEL_CASES = {
    # layout, accordrun flags -> the allreduce every rank's log must name
    "2x2": (["-H", "h1:2,h2:2"], [], "two-level"),
    "2x2_flat_asked": (["-H", "h1:2,h2:2"], ["--no-hierarchical-allreduce"], "flat"),
    "3x1": (["-H", "h1,h2,h3"], [], "flat"),
    "2p1": (["-H", "h1:2,h2:1"], [], "flat"),
    "2p1_two_level_asked": (["-H", "h1:2,h2:1"], ["--hierarchical-allreduce"], "two-level"),
}


@pytest.mark.parametrize("case", list(TWO_LEVEL_CASES))
def test_allreduce_runs_in_two_levels_by_default_where_hosts_have_equally_many_ranks(case: str) -> None:
    host_args, flags, allreduce = TWO_LEVEL_CASES[case]
    result = accordrun(*host_args, "--log-level", "debug", *flags, PYTHON, str(HERE / "allreduce_report.py"))
    assert result.returncode == 0, show(result)
    np_ = 4 if case.startswith("2x2") else 3
    checked = sorted(
        int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("ALLREDUCE_OK ")
    )
    assert checked == list(range(np_)), show(result)
    decided = re.findall(
        r"process set 0: .*?, backend (\S+) \(allreduce (\S+), allgather (\S+)\)", result.stderr
    )
    assert len(decided) == np_, show(result)
    backend = "mpi-hierarchical" if allreduce == "two-level" else "mpi"
    assert set(decided) == {(backend, allreduce, "flat")}, show(result)


# ------------------------------------------------------------- output files


def test_output_filename_holds_every_ranks_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    script = 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"; echo "err of rank $OMPI_COMM_WORLD_RANK" >&2'
    result = accordrun("-H", "h1:2,h2:1", "--output-filename", str(logs), "/bin/sh", "-c", script)
    assert result.returncode == 0, show(result)
    # Each host's Open MPI daemon writes the files of its own ranks; the bed's
    # hosts share this filesystem, so all of them are here.
    for rank, host in enumerate(["h1", "h1", "h2"]):
        rank_dir = logs / "1" / f"rank.{rank}"
        assert (rank_dir / "stdout").read_text() == f"rank {rank} on {host}\n", show(result)
        assert (rank_dir / "stderr").read_text() == f"err of rank {rank}\n", show(result)
    assert sorted(p.name for p in (logs / "1").iterdir()) == ["rank.0", "rank.1", "rank.2"]
    assert "rank 2 on h2" in result.stdout, show(result)


# ---------------------------------------------------------------- failures


def test_failing_rank_on_h2_is_named_with_its_host() -> None:
    result = accordrun("-H", "h1:2,h2:2", PYTHON, str(HERE / "fail_rank.py"), "3", "5", timeout=90)
    assert result.returncode == 5, show(result)
    assert (
        "accordrun: rank 3 (on h2) exited with status 5; it was the first rank to fail, and the other ranks "
        "were stopped"
    ) in result.stderr, show(result)
    assert "the allreduce completed" not in result.stdout, show(result)


def test_rank_killed_on_h2_is_named_with_its_host() -> None:
    script = 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then kill -KILL $$; fi; exec sleep 60'
    result = accordrun("-H", "h1:2,h2:2", "/bin/sh", "-c", script, timeout=90)
    assert result.returncode == 128 + 9, show(result)
    assert "accordrun: rank 2 (on h2) was killed by signal 9 (SIGKILL" in result.stderr, show(result)
    assert result.seconds < 50, show(result)


def test_rank_agent_killed_on_h3_is_named_with_its_host() -> None:
    # The agent is the shell's parent: without it no report of the rank's end
    # reaches accordrun.
    script = 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then kill -KILL $PPID; fi; exec sleep 60'
    result = accordrun("-H", "h1,h2,h3", "/bin/sh", "-c", script, timeout=90)
    assert result.returncode != 0, show(result)
    assert re.search(
        r"^accordrun: rank 2 \(on h3\) ended without reporting how: its rank agent was killed .*; "
        r"mpirun exited with status \d+$",
        result.stderr,
        re.M,
    ), show(result)
    assert result.seconds < 50, show(result)


# ------------------------------------------------------------ ssh options


def test_ssh_port_and_identity_file_reach_the_rsh_agent(tmp_path: Path) -> None:
    # A stand-in for ssh that logs how it was called, then starts the command
    # on the bed's host (netns-rsh skips ssh's options).
    log = tmp_path / "agent.log"
    agent = tmp_path / "logging-rsh"
    agent.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {NETNS_RSH} "$@"\n')
    agent.chmod(0o755)
    key = tmp_path / "id_test"
    key.write_text("not a real key\n")
    result = subprocess.run(
        [
            ACCORDRUN,
            "-H",
            "h1,h2",
            "--rsh-agent",
            str(agent),
            "--network-interfaces",
            SUBNET,
            "--ssh-port",
            "2222",
            "--ssh-identity-file",
            str(key),
            "/bin/true",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    calls = log.read_text().splitlines()
    for host in ("h1", "h2"):
        assert any(line.startswith(f"-p 2222 -i {key} {host} ") for line in calls), calls


def test_missing_identity_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = accordrun(
        "-H", "h1,h2", "--ssh-identity-file", str(tmp_path / "missing"), "/bin/true", timeout=30
    )
    assert result.returncode == 2, show(result)
    assert result.stderr == f"accordrun: --ssh-identity-file {tmp_path / 'missing'}: no such file\n", show(
        result
    )


# ------------------------------------------------- torch.distributed's env://


def test_torch_variables_and_gloo_across_hosts() -> None:
    """torchrun's variables on h1 and h2: MASTER_ADDR is h1's bed address, a gloo all_reduce works."""
    names = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ]
    env = {k: v for k, v in os.environ.items() if k not in names}
    result = subprocess.run(
        [
            ACCORDRUN,
            "--rsh-agent",
            str(NETNS_RSH),
            "--network-interfaces",
            SUBNET,
            "--start-timeout",
            "60",
            "-H",
            "h1:1,h2:1",
            # The bed's host names do not resolve: gloo's own address is eth0's.
            "-x",
            "GLOO_SOCKET_IFNAME=eth0",
            PYTHON,
            str(HERE / "torch_env.py"),
            "--gloo",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    reports = sorted(
        (
            json.loads(line.split(" ", 1)[1])
            for line in result.stdout.splitlines()
            if line.startswith("TORCH_ENV ")
        ),
        key=lambda r: r["env"]["RANK"],
    )
    assert [r["hostname"] for r in reports] == ["h1", "h2"], show(result)
    h1_address = SUBNET.rsplit(".", 1)[0] + ".1"
    ports = {r["env"]["MASTER_PORT"] for r in reports}
    assert len(ports) == 1, show(result)
    for rank, report in enumerate(reports):
        expected = {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank),
            "MASTER_ADDR": h1_address,
        }
        for name, value in expected.items():
            assert report["env"][name] == value, (
                f"rank {rank}: {name}={report['env'][name]!r}, expected {value!r}"
            )
        assert report["sum"] == 3.0, f"rank {rank}: all_reduce of rank + 1 gave {report['sum']}, expected 3"
    assert reports[0]["port_free"] is True, show(result)
