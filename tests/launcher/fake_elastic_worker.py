"""A rank that speaks the elastic driver's channel without accord (launcher/src/elastic_driver.h).

It connects with the variables accordrun sets, says hello, commits (writing a
file where a commit would lie), and then does what ``FAKE_WORKER_ACTION`` says
in generation 0:
  * ``kill``: rank 1 kills itself with SIGKILL after its commit;
  * ``shrink``: rank 0 rewrites the hosts file (``FAKE_WORKER_HOSTS_FILE``) to
    ``FAKE_WORKER_SHRINK_TO``; every rank waits for the driver's ``hosts`` line,
    answers ``reset <rank> hosts`` and exits 75;
  * ``error``: rank 0 reports an error and exits 1;
  * ``early``: rank 1 kills itself with SIGKILL before any rank commits.
In any other generation, or with no action, every rank reports ``done``. Each
rank appends what it saw (generation, rank, restore path) to
``FAKE_WORKER_LOG`` as one JSON line.
"""

import json
import os
import signal
import socket
import sys
import time


def connect() -> socket.socket:
    token, port, hosts = os.environ["ACCORD_ELASTIC_DRIVER"].split("@")
    for host in hosts.split(","):
        try:
            return socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            continue
    sys.exit("fake worker: cannot reach the driver at " + os.environ["ACCORD_ELASTIC_DRIVER"])


def main() -> None:
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    generation = int(os.environ["ACCORD_ELASTIC_GENERATION"])
    token = os.environ["ACCORD_ELASTIC_DRIVER"].split("@")[0]
    host = os.environ["ACCORD_ELASTIC_HOSTS"].split(",")[0].split(":")[0]
    action = os.environ.get("FAKE_WORKER_ACTION", "") if generation == 0 else ""
    with open(os.environ["FAKE_WORKER_LOG"], "a") as log:
        entry = {
            "generation": generation,
            "rank": rank,
            "restore": os.environ.get("ACCORD_ELASTIC_RESTORE", ""),
        }
        log.write(json.dumps(entry) + "\n")
    sock = connect()

    def send(line: str) -> None:
        sock.sendall((line + "\n").encode())

    send(f"worker {token} {rank} {host}")
    send(f"ready {rank} 0.01 0.02")
    if action == "early" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "early":
        time.sleep(30)  # rank 0 never commits: mpirun ends it when rank 1 dies
    commit = generation * 10 + 1
    path = os.path.join(os.environ["ACCORD_ELASTIC_SPILL_DIR"], host, f"state-g{generation}-c{commit}.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("state")
    if rank == 0:
        send(f"commit {rank} {commit} {path}")
    send(f"beat {rank}")
    if action == "kill" and rank == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "error" and rank == 0:
        send(f"error {rank} ValueError: a bad batch")
        sys.exit(1)
    if action == "shrink":
        if rank == 0:
            with open(os.environ["FAKE_WORKER_HOSTS_FILE"], "w") as f:
                f.write(os.environ["FAKE_WORKER_SHRINK_TO"] + "\n")
        deadline = time.monotonic() + 30
        sock.settimeout(1)
        received = b""
        while time.monotonic() < deadline:
            send(f"beat {rank}")
            try:
                received += sock.recv(4096)
            except socket.timeout:
                continue
            if any(line.startswith(b"hosts ") for line in received.split(b"\n")):
                send(f"reset {rank} hosts")
                sock.close()
                sys.exit(75)
        sys.exit("fake worker: no hosts line from the driver within 30 s")
    time.sleep(1)  # the killed rank's peers are still running when it dies
    send(f"done {rank}")
    sock.close()


if __name__ == "__main__":
    main()
