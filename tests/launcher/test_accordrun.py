"""End-to-end tests of accordrun: real jobs under Open MPI's mpirun.

CTest runs each test on its own (tests/CMakeLists.txt) with
    ACCORDRUN             the accordrun binary under test
    ACCORD_TEST_PYTHON    the interpreter the ranks run (it has numpy and torch)
    ACCORD_TEST_LIBTORCH  1 when the LibTorch C++ adapter is in the build
    PYTHONPATH            the staged accord package
Every run has a timeout, so a hang fails the test instead of blocking it.
"""

import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import rank_variables
from rank_variables import show

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
RUN_TIMEOUT = 120

pytestmark = pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)")


def accordrun(
    *args: str, env: Optional[Dict[str, str]] = None, timeout: float = RUN_TIMEOUT, cwd: Optional[Path] = None
) -> subprocess.CompletedProcess:
    """Runs accordrun with ``args``; the result has .returncode, .stdout, .stderr and .seconds."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    start = time.monotonic()
    result = subprocess.run(
        [ACCORDRUN, *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    result.seconds = time.monotonic() - start
    return result


def lines_matching(text: str, pattern: str) -> List[re.Match]:
    return [m for m in (re.match(pattern, line) for line in text.splitlines()) if m]


# ------------------------------------------------------------------ examples


@pytest.mark.parametrize("np_", [2, 3])
def test_pytorch_synthetic(np_: int) -> None:
    steps = 16
    result = accordrun(
        "-np",
        str(np_),
        PYTHON,
        str(EXAMPLES / "pytorch_synthetic.py"),
        "--steps",
        str(steps),
        "--batch-size",
        "32",
        "--warmup-steps",
        "2",
    )
    assert result.returncode == 0, show(result)
    step_lines = lines_matching(result.stdout, r"step +(\d+)/(\d+) +loss ([0-9.]+) +([0-9.]+) images/s")
    # Only rank 0 prints: one line per step, in order.
    assert [int(m.group(1)) for m in step_lines] == list(range(1, steps + 1)), show(result)
    losses = [float(m.group(3)) for m in step_lines]
    assert losses[-1] < losses[0], f"the loss did not fall: {losses}\n{show(result)}"
    assert all(float(m.group(4)) > 0 for m in step_lines), show(result)
    assert f"parameters identical on all {np_} rank(s)" in result.stdout, show(result)
    assert f"images/s on {np_} rank(s)" in result.stdout, show(result)


@pytest.mark.parametrize("np_", [2, 3])
def test_pytorch_mnist_like(np_: int) -> None:
    result = accordrun(
        "-np",
        str(np_),
        PYTHON,
        str(EXAMPLES / "pytorch_mnist_like.py"),
        "--epochs",
        "2",
        "--train-size",
        "2400",
        "--test-size",
        "600",
        "--lr",
        "0.03",
        "--log-interval",
        "5",
    )
    assert result.returncode == 0, show(result)
    per_rank = 2400 // np_
    assert f"on {np_} rank(s): {per_rank} training images per rank per epoch" in result.stdout, show(result)
    epochs = lines_matching(result.stdout, r"epoch (\d+): test loss ([0-9.]+), test accuracy ([0-9.]+)%")
    assert [int(m.group(1)) for m in epochs] == [1, 2], show(result)
    loss = [float(m.group(2)) for m in epochs]
    accuracy = [float(m.group(3)) for m in epochs]
    assert loss[1] < loss[0], show(result)
    assert accuracy[1] > 40.0, f"accuracy {accuracy} is too near chance (10%)\n{show(result)}"


# --------------------------------------------------------- ranks and variables


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_ranks_sizes_and_variables(np_: int) -> None:
    # OMP_NUM_THREADS unset, so that accordrun's agents set it.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(rank_variables.ENV)
    result = subprocess.run(
        [
            ACCORDRUN,
            "-np",
            str(np_),
            *rank_variables.FLAGS,
            PYTHON,
            str(HERE / "rank_report.py"),
            *rank_variables.NAMES,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    reports = [json.loads(m.group(1)) for m in lines_matching(result.stdout, r"RANK_REPORT (.*)")]
    assert sorted(r["rank"] for r in reports) == list(range(np_)), show(result)
    shares, threads = rank_variables.expected_binding(np_)
    for report in reports:
        rank = report["rank"]
        assert report["size"] == np_, f"rank {rank}: size {report['size']}, expected {np_}"
        assert report["ompi_rank"] == rank, f"rank {rank}: Open MPI says rank {report['ompi_rank']}"
        assert report["local_rank"] == rank, (
            f"rank {rank}: local rank {report['local_rank']}, expected {rank}"
        )
        assert report["local_size"] == np_, f"rank {rank}: local size {report['local_size']}, expected {np_}"
        assert report["rank_sum"] == np_ * (np_ + 1) / 2, f"rank {rank}: sum {report['rank_sum']}"
        # The real affinity: the rank's share of this machine's cores.
        assert report["cpus"] == shares[rank], (
            f"rank {rank} may run on CPUs {report['cpus']}, expected {shares[rank]}\n{show(result)}"
        )
        rank_variables.check(report, threads, show(result))
    cores = len(rank_variables.usable_cores())
    on_cores = f"{np_} rank{'s' if np_ > 1 else ''} on the {cores} core{'s' if cores > 1 else ''} of "
    if np_ <= cores:
        assert re.search(
            rf"^accordrun: note: binding: {on_cores}\S+: .*, OMP_NUM_THREADS={threads}; set "
            "OMP_NUM_THREADS to choose another value$",
            result.stderr,
            re.M,
        ), show(result)
    else:  # said once, by the host's local rank 0
        notes = re.findall(
            rf"^accordrun: note: {on_cores}\S+: not bound, OMP_NUM_THREADS=1 \(more ranks than "
            "cores",
            result.stderr,
            re.M,
        )
        assert len(notes) == 1, show(result)
        assert "binding:" not in result.stderr, show(result)
    if np_ > (os.cpu_count() or 1):
        assert "adding --oversubscribe" in result.stderr, show(result)


def test_omp_num_threads_of_the_user_wins() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    result = subprocess.run(
        [ACCORDRUN, "-np", "2", PYTHON, str(HERE / "rank_report.py"), "OMP_NUM_THREADS"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    reports = [json.loads(m.group(1)) for m in lines_matching(result.stdout, r"RANK_REPORT (.*)")]
    assert len(reports) == 2, show(result)
    shares, _ = rank_variables.expected_binding(2)
    for report in reports:
        assert report["env"]["OMP_NUM_THREADS"] == "3", show(result)
        assert report["cpus"] == shares[report["rank"]], show(result)
    assert "OMP_NUM_THREADS=3 (as set)" in result.stderr, show(result)


def test_report_bindings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run(
        [ACCORDRUN, "-np", "2", "--report-bindings", "/bin/sh", "-c", 'test -z "$ACCORDRUN_REPORT_BINDINGS"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    shares, threads = rank_variables.expected_binding(2)
    for rank, cpus in enumerate(shares):
        lines = re.findall(
            rf"^accordrun: rank {rank} binding: local rank {rank} of 2 on \S+: CPUs (\S+), "
            rf"OMP_NUM_THREADS=(\d+)$",
            result.stderr,
            re.M,
        )
        assert len(lines) == 1, show(result)
        listed, omp = lines[0]
        got = sorted(
            cpu
            for part in listed.split(",")
            for cpu in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)
        )
        assert got == cpus and omp == threads, show(result)


def test_binding_of_the_user_wins() -> None:
    # mpirun binds each rank to one core; the agents only choose the threads.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run(
        [
            ACCORDRUN,
            "-np",
            "1",
            "--mpi-args=--bind-to core",
            PYTHON,
            str(HERE / "rank_report.py"),
            "OMP_NUM_THREADS",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, show(result)
    reports = [json.loads(m.group(1)) for m in lines_matching(result.stdout, r"RANK_REPORT (.*)")]
    assert len(reports) == 1, show(result)
    first_core = rank_variables.usable_cores()[0][1]
    assert reports[0]["cpus"] == first_core, show(result)
    assert reports[0]["env"]["OMP_NUM_THREADS"] == "1", show(result)
    assert "binding:" not in result.stderr, show(result)


# ------------------------------------------------------------------ failures


def test_failing_rank_sets_exit_status_and_is_named() -> None:
    result = accordrun("-np", "3", PYTHON, str(HERE / "fail_rank.py"), "1", "3", timeout=60)
    assert result.returncode == 3, show(result)
    host = socket.gethostname()
    assert (
        f"accordrun: rank 1 (on {host}) exited with status 3; it was the first rank to fail, "
        "and the other ranks were stopped"
    ) in result.stderr, show(result)
    assert "the allreduce completed" not in result.stdout, show(result)
    assert "Traceback" not in result.stderr, show(result)


def test_rank_killed_by_signal() -> None:
    script = 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -KILL $$; fi; exec sleep 60'
    result = accordrun("-np", "2", "/bin/sh", "-c", script, timeout=60)
    assert result.returncode == 128 + signal.SIGKILL, show(result)
    assert "rank 1 (on " in result.stderr and "was killed by signal 9 (SIGKILL" in result.stderr, show(result)
    assert result.seconds < 50, show(result)


def test_output_filename_writes_one_directory_per_rank(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    script = 'echo "stdout of rank $OMPI_COMM_WORLD_RANK"; echo "stderr of rank $OMPI_COMM_WORLD_RANK" >&2'
    result = accordrun("-np", "2", "--output-filename", str(logs), "/bin/sh", "-c", script)
    assert result.returncode == 0, show(result)
    for rank in range(2):
        rank_dir = logs / "1" / f"rank.{rank}"
        assert (rank_dir / "stdout").read_text() == f"stdout of rank {rank}\n"
        assert (rank_dir / "stderr").read_text() == f"stderr of rank {rank}\n"
    # The console still shows the output.
    assert "stdout of rank 0" in result.stdout and "stdout of rank 1" in result.stdout, show(result)


def fake_mpirun(directory: Path, version_line: str, body: str) -> Dict[str, str]:
    """A directory with an `mpirun` script, and the environment that finds it first."""
    directory.mkdir()
    script = directory / "mpirun"
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{version_line}"; exit 0; fi\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}:{os.environ['PATH']}"}


def test_start_timeout_stops_a_job_whose_ranks_never_start(tmp_path: Path) -> None:
    env = fake_mpirun(tmp_path / "bin", "mpirun (Open MPI) 4.1.4", "exec sleep 60")
    result = accordrun("--start-timeout", "1", "-np", "2", "/bin/true", env=env, timeout=60)
    assert result.returncode == 1, show(result)
    assert (
        "only 0 of 2 ranks started within 1 s (--start-timeout); not started: rank 0, 1; stopping the job"
        in result.stderr
    ), show(result)
    assert result.seconds < 30, show(result)


# ------------------------------------------------------------- the command


def test_dry_run_prints_the_command_that_verbose_runs() -> None:
    args = [
        "-np",
        "2",
        "--fusion-threshold-mb",
        "32",
        "-x",
        "ACCORD_TEST_WORDS=two words",
        "/bin/sh",
        "-c",
        'test "$ACCORD_TEST_WORDS" = \'two words\' && test "$ACCORD_FUSION_THRESHOLD" = 33554432',
    ]
    dry = accordrun("--dry-run", *args)
    assert dry.returncode == 0, show(dry)
    command = shlex.split(dry.stdout)
    assert Path(command[0]).name == "mpirun"
    assert command[1:3] == ["-np", "2"]
    for assignment in ["ACCORD_FUSION_THRESHOLD=33554432", "ACCORD_TEST_WORDS=two words"]:
        assert assignment in command and command[command.index(assignment) - 1] == "-x", command
    assert command[-5:-3] == [os.path.realpath(ACCORDRUN), "--rank-agent"]
    assert command[-3:-1] == ["/bin/sh", "-c"]
    if os.geteuid() == 0:
        assert "--allow-run-as-root" in command
    assert command[command.index("ACCORDRUN_BIND=share") - 1] == "-x", command
    # The plan of each local rank, on stderr: the command alone is on stdout.
    shares, threads = rank_variables.expected_binding(2)
    for local_rank, _cpus in enumerate(shares):
        line = re.search(rf"^accordrun: binding: \S+ local rank {local_rank}: (.*)$", dry.stderr, re.M)
        assert line, show(dry)
        assert line.group(1).endswith(f"OMP_NUM_THREADS={threads}"), show(dry)
        if len(rank_variables.usable_cores()) >= 2:
            assert line.group(1).startswith(("core ", "cores ")), show(dry)

    verbose = accordrun("--verbose", *args)
    assert verbose.returncode == 0, show(verbose)
    assert f"accordrun: running {dry.stdout.strip()}\n" in verbose.stderr, show(verbose)
    assert "accordrun: all 2 ranks started in" in verbose.stderr, show(verbose)
    assert "accordrun: all 2 ranks exited with status 0" in verbose.stderr, show(verbose)


def test_check_build_lists_frameworks_controllers_and_backends() -> None:
    result = accordrun("--check-build", env={"ACCORDRUN_PYTHON": PYTHON})
    assert result.returncode == 0, show(result)
    out = result.stdout
    assert re.match(r"accord v\d+\.\d+\.\d+:\n", out), out
    assert re.search(r"^    \[X\] numpy +\(accord with numpy [0-9.]+", out, re.M), out
    assert re.search(r"^    \[X\] torch via DLPack +\(accord.torch with torch ", out, re.M), out
    libtorch = "X" if os.environ.get("ACCORD_TEST_LIBTORCH") == "1" else " "
    assert re.search(rf"^    \[{libtorch}\] LibTorch C\+\+", out, re.M), out
    assert "Available Controllers:\n    [X] MPI\n" in out, out
    assert f"Available Tensor Operations:\n    [X] MPI\n{backend_lines()}\n" in out, out
    assert f"Python: {PYTHON}" in out, out


def backend_lines() -> str:
    """The NCCL and CUDA lines --check-build must print, from what accord._core says this build has."""
    probe = subprocess.run(
        [PYTHON, "-c", "import json, accord._core; print(json.dumps(accord._core.build_info()))"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert probe.returncode == 0, f"accord._core.build_info() failed:\n{probe.stdout}{probe.stderr}"
    info = json.loads(probe.stdout)
    lines = ""
    for name, pattern in (("nccl", r"NCCL \d+\.\d+\.\d+"), ("cuda", r"CUDA \d+\.\d+( \(driver \d+\.\d+\))?")):
        version = info[f"{name}_version"]
        if not info[name]:
            assert version == "", info
            lines += f"    [ ] {name.upper()}\n"
            continue
        assert re.fullmatch(pattern, version), f"{name}_version {version!r} does not match {pattern}"
        lines += f"    [X] {name.upper():<18}({version})\n"
    return lines


def test_check_build_without_python(tmp_path: Path) -> None:
    result = accordrun("--check-build", env={"ACCORDRUN_PYTHON": str(tmp_path / "no-python")})
    assert result.returncode == 0, show(result)
    assert re.search(
        r"^    \[ \] numpy +\(not found: ACCORDRUN_PYTHON=.*no-python: cannot run .*: no such file\)$",
        result.stdout,
        re.M,
    ), show(result)
    assert re.search(r"^    \[ \] torch via DLPack +\(not found: ", result.stdout, re.M), show(result)
    assert "[X] MPI" in result.stdout, show(result)


# ------------------------------------------------------------- bad input

BAD_INPUT = [
    (
        ["-np", "2", "--bogus", "true"],
        "accordrun: unknown option --bogus (accordrun --help lists the options)",
    ),
    (["-np", "0", "true"], "accordrun: -np must be at least 1 (got 0)"),
    (["-np", "-3", "true"], "accordrun: -np must be at least 1 (got -3)"),
    (["-np", "many", "true"], 'accordrun: -np "many" is not a whole number'),
    (["true"], "accordrun: -np is required"),
    (["-np", "2"], "accordrun: no program to run"),
    (
        ["-np", "5", "-H", "localhost:2,other:2", "true"],
        "accordrun: -np 5 is more than the 4 slots that -H offers (localhost:2,other:2); "
        "lower -np or add slots",
    ),
    (["-np", "2", "-H", "localhost:two", "true"], 'the slots of "localhost:two" must be a whole number'),
    (["-np", "2", "-H", "localhost:1,,x", "true"], "an entry is empty"),
    (
        ["-np", "2", "--hostfile", "@HOSTFILE@", "true"],
        'line 3 "node2 slots=0": slots must be a whole number',
    ),
    (["-np", "2", "--hostfile", "@MISSING@", "true"], "accordrun: cannot read hostfile"),
    (
        ["-np", "2", "no-such-program-anywhere"],
        'accordrun: cannot run "no-such-program-anywhere": no such program in PATH',
    ),
    (["-np", "2", "./no/such/script.py"], 'accordrun: cannot run "./no/such/script.py": no such file'),
    (["-np", "2", "-x", "9LIVES=1", "true"], "is not a valid environment variable name"),
    (["-np", "2", "--fusion-threshold-mb", "lots", "true"], '--fusion-threshold-mb "lots" is not valid'),
    (["-np", "2", "--autotune-warmup-samples", "3", "true"], "--autotune-warmup-samples needs --autotune"),
    (["-np", "2", "--mpi-args", "--mca 'x", "true"], "a ' quote is not closed"),
    (["-np", "2", "--gloo", "true"], "--gloo is not supported"),
    (
        ["-np", "2", "--ssh-port", "ssh", "true"],
        'accordrun: --ssh-port "ssh" is not valid: expected a port number from 1 to 65535',
    ),
    (["-np", "2", "-H", "a,b", "--ssh-identity-file", "@MISSING@", "true"], "/missing: no such file"),
    (["-np", "2", "--network-interfaces", "10.0.0.1", "true"], '"10.0.0.1" is an address, not a subnet'),
    (
        ["-np", "2", "-H", "a,b", "--rsh-agent", "/no/such/agent", "true"],
        'accordrun: --rsh-agent /no/such/agent: cannot run "/no/such/agent": no such file',
    ),
    (
        [
            "-np",
            "2",
            "-H",
            "a,b",
            "--network-interfaces",
            "eth0",
            "--mpi-args",
            "--mca btl_tcp_if_exclude lo",
            "true",
        ],
        "--network-interfaces cannot be combined with btl_tcp_if_exclude in --mpi-args",
    ),
]


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=[" ".join(a)[:40] for a, _ in BAD_INPUT])
def test_bad_input_is_refused_clearly(tmp_path: Path, args: List[str], message: str) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\nnode2 slots=0\n")
    args = [
        str(hostfile) if a == "@HOSTFILE@" else str(tmp_path / "missing") if a == "@MISSING@" else a
        for a in args
    ]
    result = accordrun(*args, timeout=30)
    assert result.returncode == 2, show(result)
    assert message in result.stderr, show(result)
    assert result.stderr.count("\n") == 1, f"expected one line:\n{show(result)}"
    assert "Traceback" not in result.stderr and result.stdout == "", show(result)


def test_mpirun_missing_from_path(tmp_path: Path) -> None:
    result = accordrun("-np", "2", "/bin/true", env={"PATH": str(tmp_path)}, timeout=30)
    assert result.returncode == 2, show(result)
    assert result.stderr == (
        "accordrun: mpirun is not in PATH: accordrun runs jobs with Open MPI's mpirun "
        "(Debian: apt-get install openmpi-bin)\n"
    ), show(result)


def test_mpirun_that_is_not_open_mpi(tmp_path: Path) -> None:
    env = fake_mpirun(tmp_path / "bin", "HYDRA build details:", "exit 99")
    result = accordrun("-np", "2", "/bin/true", env=env, timeout=30)
    assert result.returncode == 2, show(result)
    assert 'is not Open MPI\'s mpirun (it says "HYDRA build details:")' in result.stderr, show(result)
