"""Run by the launcher tests under accordrun: every rank prints what it sees.

Each rank initialises accord, checks with an allreduce that all ranks take
part, and prints one line ``RANK_REPORT <json>`` with its rank, size, local
and cross rank and size (from accord, and the rank from Open MPI's
environment), its host name, the CPUs it may run on, the sum of every rank's
``rank + 1``, and the environment variables named on the command line.
"""

import json
import os
import socket
import sys

import numpy as np

import accord


def main() -> None:
    accord.init()
    rank = accord.rank()
    total = accord.allreduce(np.array([rank + 1.0]), op=accord.Sum, name="rank_sum")
    report = {
        "rank": rank,
        "size": accord.size(),
        "local_rank": accord.local_rank(),
        "local_size": accord.local_size(),
        "cross_rank": accord.cross_rank(),
        "cross_size": accord.cross_size(),
        "hostname": socket.gethostname(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "ompi_rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1")),
        "rank_sum": float(total[0]),
        "env": {name: os.environ.get(name) for name in sys.argv[1:]},
    }
    # One write for the whole line, so that mpirun cannot interleave it with
    # another rank's output.
    os.write(sys.stdout.fileno(), ("RANK_REPORT " + json.dumps(report, sort_keys=True) + "\n").encode())
    accord.shutdown()


if __name__ == "__main__":
    main()
