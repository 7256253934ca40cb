"""The timeline: ACCORD_TIMELINE at init, start_timeline/stop_timeline, and
what rank 0 writes (Chrome trace events that json.loads reads, with the
NEGOTIATE and COLLECTIVE phases of every named tensor, and PACK and UNPACK
around the COLLECTIVE of a fused batch)."""

import os

import numpy as np
import pytest

import accord

from conftest import all_inputs, assert_close
from timeline_check import check_tensor, load_events, phases_by_track

SHAPES = [(7,), (3, 5), (64,)]


GROUP = [(5,), (2, 3), (16,)]


def run_allreduces(prefix: str, rank: int, size: int) -> dict:
    """Named allreduces (three enqueued together, then a group of three, which is
    always one fused batch); returns name -> bytes."""
    sizes = {}
    for i, shape in enumerate(SHAPES):
        name = f"{prefix}.single.{i}"
        inputs = all_inputs(name, size, shape, np.float32)
        assert_close(
            accord.allreduce(inputs[rank], op=accord.Sum, name=name), np.sum(np.stack(inputs), axis=0), name
        )
        sizes[name] = int(np.prod(shape)) * 4
    handles = []
    for i, shape in enumerate(SHAPES):
        name = f"{prefix}.burst.{i}"
        inputs = all_inputs(name, size, shape, np.float64)
        handles.append((name, inputs, accord.allreduce_async(inputs[rank], op=accord.Sum, name=name)))
        sizes[name] = int(np.prod(shape)) * 8
    for name, inputs, handle in handles:
        assert_close(accord.synchronize(handle), np.sum(np.stack(inputs), axis=0), name)
    group = [all_inputs(f"{prefix}.group.{i}", size, shape, np.float32) for i, shape in enumerate(GROUP)]
    results = accord.grouped_allreduce(
        [inputs[rank] for inputs in group], op=accord.Sum, name=f"{prefix}.group"
    )
    for i, (inputs, got) in enumerate(zip(group, results)):
        name = f"{prefix}.group.{i}"
        assert_close(got, np.sum(np.stack(inputs), axis=0), name)
        sizes[name] = int(np.prod(GROUP[i])) * 4
    return sizes


def check_file(path: str, sizes: dict, strict: bool) -> list:
    if strict:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert text.rstrip().endswith("]"), f"{path}: a stopped timeline must close its array"
    events = load_events(path)
    by_track = phases_by_track(events)
    for name, nbytes in sizes.items():
        tensors = check_tensor(by_track, name, nbytes)
        if ".group." in name:
            assert tensors == len(GROUP), (
                f"{name}: the group ran in a batch of {tensors} tensors, not {len(GROUP)}"
            )
    return events


def test_env_timeline(rank, size):
    path = os.environ.get("ACCORD_TIMELINE")
    if not path:
        pytest.skip("ACCORD_TIMELINE is not set")
    sizes = run_allreduces("env", rank, size)
    accord.stop_timeline()
    if rank == 0:
        check_file(path, sizes, strict=True)
    accord.barrier()


def test_start_stop_timeline(rank, size, tmp_path):
    # Only rank 0 writes: its own temporary directory is the one that counts.
    path = str(tmp_path / "timeline.json")
    accord.start_timeline(path, mark_cycles=True)
    sizes = run_allreduces("api", rank, size)
    accord.stop_timeline()
    accord.stop_timeline()  # a second stop does nothing
    if rank == 0:
        events = check_file(path, sizes, strict=True)
        assert any(e["name"] == "CYCLE" for e in events), "mark_cycles=True but no CYCLE event"
    else:
        assert not os.path.exists(path), "only rank 0 writes the timeline"
    accord.barrier()


def test_start_timeline_bad_path(rank, size):
    if rank == 0:
        with pytest.raises(ValueError, match="timeline"):
            accord.start_timeline("/nonexistent-dir/for/accord/timeline.json")
    with pytest.raises(ValueError):
        accord.start_timeline("")
    accord.barrier()


def test_timeline_size_limit(rank, size, tmp_path):
    limit_mb = os.environ.get("ACCORD_TIMELINE_MAX_MB")
    if not limit_mb:
        pytest.skip("ACCORD_TIMELINE_MAX_MB is not set")
    limit = int(limit_mb) << 20
    path = str(tmp_path / "bounded.json")
    accord.start_timeline(path)
    # Bursts of 500 tensors: each writes over 600 bytes of events (its
    # COLLECTIVE lists 32 fused names), so the bursts fill the limit about
    # three times over, in few negotiation rounds.
    burst = 500
    bursts = max(2, 3 * limit // (600 * burst))
    for b in range(bursts):
        xs = [np.full(4, rank + j % 7, np.int32) for j in range(burst)]
        handles = [accord.allreduce_async(x, op=accord.Sum, name=f"bounded.{j}") for j, x in enumerate(xs)]
        for j, h in enumerate(handles):
            want = size * (size - 1) // 2 + size * (j % 7)
            assert_close(accord.synchronize(h), np.full(4, want, np.int32), f"bounded.{j} (burst {b})")
    accord.stop_timeline()
    if rank == 0:
        assert os.path.getsize(path) <= limit + (64 << 10), f"{path}: {os.path.getsize(path)} bytes > {limit}"
        events = check_file(path, {}, strict=True)
        assert any(e["name"] == "TIMELINE_EVENTS_DROPPED" for e in events), "no marker for the dropped events"
        by_track = phases_by_track(events)
        for j in range(burst - 3, burst):
            check_tensor(by_track, f"bounded.{j}", 16)
    accord.barrier()
