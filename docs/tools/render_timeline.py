#!/usr/bin/env python3
"""Renders an accord timeline file into a PNG that looks like a trace viewer.

One row per tensor track, one colored bar per complete ("X") event, colored
by phase (NEGOTIATE, QUEUE, PACK, COLLECTIVE, UNPACK), a time axis in
milliseconds and a legend. A file cut short (no closing "]") is read too.

Usage:
    render_timeline.py TIMELINE.json OUT.png [--start-ms A] [--end-ms B]
                       [--tracks N] [--trim-json OUT.json]

--start-ms/--end-ms pick a window of the timeline; --tracks keeps the first N
tracks (in order of first appearance); --trim-json also writes the events in
the window (with the names of their tracks) as a smaller timeline file that
Perfetto and chrome://tracing open.

Needs matplotlib (Debian: python3-matplotlib); nothing else in accord does.
"""

import argparse
import json
import sys
from typing import Dict, List, Tuple

PHASE_COLORS = {
    "NEGOTIATE": "#8da0cb",
    "QUEUE": "#e5c494",
    "PACK": "#66c2a5",
    "COLLECTIVE": "#fc8d62",
    "UNPACK": "#a6d854",
}


def load_events(path: str) -> List[dict]:
    """The events of a timeline file, complete or cut short."""
    with open(path, encoding="utf-8") as f:
        body = f.read().rstrip()
    if not body.endswith("]"):
        body = body.rstrip(",") + "]"
    return json.loads(body)


def select(
    events: List[dict], start_us: float, end_us: float, max_tracks: int
) -> Tuple[Dict[int, str], List[dict]]:
    """Track names (tid -> name) and the complete events inside the window,
    on at most `max_tracks` tracks."""
    names = {
        e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    spans = [
        e
        for e in events
        if e.get("ph") == "X" and e["tid"] in names and e["ts"] + e["dur"] >= start_us and e["ts"] <= end_us
    ]
    order: List[int] = []
    for e in spans:
        if e["tid"] not in order:
            order.append(e["tid"])
    keep = set(order[:max_tracks])
    return {tid: names[tid] for tid in order if tid in keep}, [e for e in spans if e["tid"] in keep]


def write_trimmed(path: str, tracks: Dict[int, str], spans: List[dict]) -> None:
    """Writes the selected events as a timeline file (one event per line)."""
    lines = [
        json.dumps({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}})
        for tid, name in tracks.items()
    ]
    lines += [json.dumps(e) for e in sorted(spans, key=lambda e: (e["ts"], e["tid"]))]
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(lines) + "\n]\n")


def render(tracks: Dict[int, str], spans: List[dict], out: str, title: str) -> None:
    """Draws the spans, one row per track, and saves the figure as `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = {tid: i for i, tid in enumerate(tracks)}
    origin = min(e["ts"] for e in spans)
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.6), dpi=90)
    for e in spans:
        color = PHASE_COLORS.get(e["name"], "#b3b3b3")
        start_ms = (e["ts"] - origin) / 1000.0
        width_ms = max(e["dur"], 1) / 1000.0  # keep zero-length spans visible
        ax.broken_barh(
            [(start_ms, width_ms)],
            (rows[e["tid"]] - 0.38, 0.76),
            facecolors=color,
            edgecolors="#404040",
            linewidth=0.3,
        )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([tracks[tid] for tid in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time since the first event shown (ms)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=10)
    shown = [p for p in PHASE_COLORS if any(e["name"] == p for e in spans)]
    fig.legend(
        handles=[Patch(facecolor=PHASE_COLORS[p], edgecolor="#404040", label=p) for p in shown],
        loc="lower center",
        ncol=len(shown),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))
    fig.savefig(out)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("timeline")
    parser.add_argument("png")
    parser.add_argument("--start-ms", type=float, default=0.0)
    parser.add_argument("--end-ms", type=float, default=float("inf"))
    parser.add_argument("--tracks", type=int, default=24)
    parser.add_argument("--trim-json", default=None)
    parser.add_argument("--title", default="accord timeline (rank 0)")
    args = parser.parse_args(argv)
    tracks, spans = select(load_events(args.timeline), args.start_ms * 1000, args.end_ms * 1000, args.tracks)
    if not spans:
        print(f"{args.timeline}: no complete events in the window", file=sys.stderr)
        return 1
    if args.trim_json:
        write_trimmed(args.trim_json, tracks, spans)
    render(tracks, spans, args.png, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
