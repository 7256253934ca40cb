"""Statistics, result checks, waiting and reporting for python_bench.py.

Nothing here imports accord, torch or mpi4py at module level, so the main
script can set thread-count environment variables before any of them loads.
"""

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def mib_sizes(text: str) -> List[int]:
    """An argparse type: comma-separated sizes in MiB, each 1..1024."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated MiB counts, got {text!r}") from None
    if not sizes or any(s < 1 or s > 1024 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be 1..1024 MiB, got {text!r}")
    return sizes


def workload_list(choices: Sequence[str]) -> Callable[[str], List[str]]:
    """An argparse type: a comma-separated, non-empty list of names from ``choices``,
    lower-cased."""

    def parse(text: str) -> List[str]:
        items = [w.strip().lower() for w in text.split(",") if w.strip()]
        bad = [w for w in items if w not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown workload(s) {bad}; choose from {','.join(choices)}")
        return items

    return parse


def import_accord_torch(program: str) -> Optional[Any]:
    """``accord.torch``, or None after telling the user how to make it importable."""
    try:
        import accord.torch as hvd
    except ImportError as error:
        print(
            f"{program}: cannot import accord.torch ({error}); set "
            "PYTHONPATH=<build>/python or install the package",
            file=sys.stderr,
        )
        return None
    return hvd


def load_average() -> float:
    """The machine's 1-minute load average (-1 if unknown)."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def cpu_times() -> Optional[List[int]]:
    """The host's CPU time by state since boot (/proc/stat's "cpu" line; None if unknown)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return [int(x) for x in fields[1:]]


def idle_share(before: Optional[List[int]], after: Optional[List[int]]) -> Optional[float]:
    """The share of CPU time that was idle (idle + iowait) between two cpu_times()."""
    if before is None or after is None:
        return None
    spent = [b - a for a, b in zip(before, after)]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    total = sum(spent[:8])
    return (spent[3] + spent[4]) / total if total > 0 else None


def median(values: Sequence[float]) -> float:
    """The median (mean of the middle two for an even count); 0 for no values."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def quantile(values: Sequence[float], q: float) -> float:
    """The smallest value with at least a fraction ``q`` of the values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = max(1, math.ceil(q * len(ordered)))
    return ordered[min(len(ordered), index) - 1]


def flatten(rounds: Sequence[Sequence[float]]) -> List[float]:
    """All samples of all rounds in one list."""
    return [v for r in rounds for v in r]


def paired_ratio(
    a_rounds: Sequence[Sequence[float]], b_rounds: Sequence[Sequence[float]], inverse: bool = False
) -> float:
    """Median over rounds of median(a's round) / median(b's round).

    With ``inverse`` the per-round ratio is b / a (for times whose figure is
    a rate, such as bandwidth).
    """
    ratios = []
    for a, b in zip(a_rounds, b_rounds):
        ma, mb = median(a), median(b)
        num, den = (mb, ma) if inverse else (ma, mb)
        if den > 0:
            ratios.append(num / den)
    return median(ratios)


def rotated(items: Sequence[Any], by: int) -> List[Any]:
    """``items`` rotated left by ``by`` places: how the sides take turns round by round."""
    if not items:
        return []
    k = by % len(items)
    return list(items[k:]) + list(items[:k])


def lazy_barrier(comm) -> None:
    """An MPI barrier that sleeps while it waits, so a waiting rank leaves its core alone."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


class Checker:
    """Counts wrong results on this rank and prints the first few of each check."""

    _PRINTED_PER_LABEL = 5

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.failures = 0
        self._printed: Dict[str, int] = {}

    def _report(self, label: str, message: str) -> None:
        """Counts a failure; prints the first few of each label (one write, so ranks' lines
        do not interleave)."""
        self.failures += 1
        count = self._printed.get(label, 0) + 1
        self._printed[label] = count
        if count <= self._PRINTED_PER_LABEL:
            sys.stderr.write(f"rank {self.rank}: {label}: {message}\n")
            sys.stderr.flush()
        if count == self._PRINTED_PER_LABEL:
            sys.stderr.write(f"rank {self.rank}: {label}: further failures are counted, not printed\n")
            sys.stderr.flush()

    def equal_all(self, label: str, tensor, expected: float) -> None:
        """Every element of ``tensor`` (torch, 1-D or not) must equal ``expected`` exactly."""
        import torch

        flat = tensor.reshape(-1)
        wrong = flat != expected
        if not bool(wrong.any()):
            return
        indices = torch.nonzero(wrong).reshape(-1)
        first = ", ".join(f"[{int(i)}] expected {expected!r}, got {float(flat[i])!r}" for i in indices[:3])
        self._report(label, f"{indices.numel()} of {flat.numel()} elements wrong: {first}")

    def close_all(self, label: str, got, expected, rtol: float, atol: float) -> None:
        """Every element of ``got`` must satisfy |got - expected| <= atol + rtol * |expected|."""
        import torch

        got = got.reshape(-1).to(torch.float64)
        expected = expected.reshape(-1).to(torch.float64)
        wrong = (got - expected).abs() > atol + rtol * expected.abs()
        if not bool(wrong.any()):
            return
        indices = torch.nonzero(wrong).reshape(-1)
        first = ", ".join(
            f"[{int(i)}] expected {float(expected[i])!r}, got {float(got[i])!r}" for i in indices[:3]
        )
        self._report(
            label, f"{indices.numel()} of {got.numel()} elements outside rtol={rtol:g} atol={atol:g}: {first}"
        )

    def fail(self, label: str, message: str) -> None:
        """Counts a failure described by ``message``."""
        self._report(label, message)


@dataclass
class Figure:
    """One reported figure: accord's value beside a reference's, and their paired ratio."""

    workload: str
    metric: str
    accord: float
    reference: str
    raw: float
    ratio: float
    target: str = ""
    met: Optional[bool] = None


@dataclass
class Reporter:
    """Prints figures as ``ACCORD_PYBENCH {json}`` lines (rank 0) and a table at the end."""

    rank: int
    size: int
    reference_mode: str
    figures: List[Figure] = field(default_factory=list)
    program: str = "python_bench"  # heads the table

    def add(self, figure: Figure) -> None:
        """Reports a figure that has no target."""
        self._emit(figure)

    def add_ratio(self, figure: Figure, min_ratio: float) -> None:
        """Reports a figure whose ratio must be at least ``min_ratio``."""
        figure.target = f"ratio >= {min_ratio:.2f}"
        figure.met = figure.ratio >= min_ratio
        self._emit(figure)

    def add_margin(self, figure: Figure, max_extra: float) -> None:
        """Reports a figure whose accord value must be at most the reference's plus ``max_extra``."""
        figure.target = f"accord <= reference + {max_extra:g}"
        figure.met = figure.accord <= figure.raw + max_extra
        self._emit(figure)

    def _emit(self, f: Figure) -> None:
        if self.rank != 0:
            return
        self.figures.append(f)
        record = {
            "workload": f.workload,
            "metric": f.metric,
            "np": self.size,
            "accord": float(f"{f.accord:.6g}"),
            "reference": f.reference,
            "reference_mode": self.reference_mode,
            "raw": float(f"{f.raw:.6g}"),
            "ratio": round(f.ratio, 4),
            "target": f.target,
            "met": f.met,
            "load1": round(load_average(), 2),
        }
        print("ACCORD_PYBENCH " + json.dumps(record, separators=(",", ":")), flush=True)

    def print_table(self, notes: Sequence[str] = ()) -> None:
        if self.rank != 0:
            return
        where = "with accord shut down" if self.reference_mode == "alone" else "beside idle accord"
        print(
            f"\n{self.program}, np={self.size}, references run {where} (ratio = accord / reference, paired)"
        )
        print(
            f"load average now {load_average():.2f} (other users' jobs on the machine distort every figure)"
        )
        row = "{:<4} {:<24} {:>12} {:<20} {:>12} {:>8}  {:<16} {}"
        print(row.format("id", "metric", "accord", "reference", "reference", "ratio", "target", ""))
        for f in self.figures:
            raw = f"{f.raw:.4g}" if f.raw else "-"
            ratio = f"{f.ratio:.3f}" if f.raw else "-"
            verdict = "" if f.met is None else ("met" if f.met else "MISSED")
            print(
                row.format(
                    f.workload, f.metric, f"{f.accord:.4g}", f.reference, raw, ratio, f.target or "-", verdict
                )
            )
        for note in notes:
            print(note)
        sys.stdout.flush()


def timed(fn: Callable[[], Any]) -> float:
    """Seconds that ``fn()`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
