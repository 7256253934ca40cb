#!/usr/bin/python3
"""tcp_capacity: the raw capacity of a link of the multi-host test bed.

    tcp_capacity.py serve PORT              (on the receiving host)
    tcp_capacity.py send ADDRESS PORT MIB   (on the sending host)

The sender writes MIB mebibytes over one TCP connection as fast as the link
takes them; the receiver reads them and prints one line
``TCP_CAPACITY {"gbit_per_s": ..., "mib": ..., "seconds": ...}``, timed from
the first byte received to the last. This is the physical limit the
multi-host figures in docs/benchmarks.md are set beside (benchmarks/
multihost_bench.sh runs it).
"""

import json
import socket
import sys
import time

CHUNK = 1 << 20


def serve(port: int) -> None:
    with socket.create_server(("0.0.0.0", port)) as server:
        conn, _ = server.accept()
        with conn:
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            total = conn.recv_into(view)
            start = time.perf_counter()
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                total += n
            seconds = time.perf_counter() - start
    mib = total / CHUNK
    print(
        "TCP_CAPACITY "
        + json.dumps(
            {
                "gbit_per_s": round(total * 8 / seconds / 1e9, 3),
                "mib": round(mib, 1),
                "seconds": round(seconds, 3),
            }
        ),
        flush=True,
    )


def send(address: str, port: int, mib: int) -> None:
    payload = bytes(CHUNK)
    for attempt in range(100):  # the receiver may still be starting
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except OSError:
            if attempt == 99:
                raise
            time.sleep(0.05)
    with conn:
        for _ in range(mib):
            conn.sendall(payload)


def main(argv) -> int:
    if len(argv) == 2 and argv[0] == "serve":
        serve(int(argv[1]))
    elif len(argv) == 4 and argv[0] == "send":
        send(argv[1], int(argv[2]), int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
