"""Reading and checking accord timeline files (shared by the timeline tests).

A timeline is the JSON Array Format of the Chrome trace-event format: "[",
then one event per line followed by a comma; a stopped timeline ends with a
last event and "]", a killed process leaves the file without the bracket.
"""

import json
from typing import Dict, List


def load_events(path: str) -> List[dict]:
    """The events of a timeline file, complete or cut short."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = text.rstrip()
    if not body.endswith("]"):
        body = body.rstrip(",") + "]"
    events = json.loads(body)
    assert isinstance(events, list), f"{path}: not a JSON array"
    return events


def tracks(events: List[dict]) -> Dict[int, str]:
    """tid -> track name, from the "thread_name" metadata events."""
    return {
        e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def phases_by_track(events: List[dict]) -> Dict[str, List[dict]]:
    """Track name -> its complete ("X") events, in file order."""
    names = tracks(events)
    result: Dict[str, List[dict]] = {}
    for e in events:
        if e.get("ph") == "X":
            assert e["tid"] in names, f"event on a track with no name: {e}"
            assert e["dur"] >= 0 and e["ts"] >= 0, f"negative time: {e}"
            result.setdefault(names[e["tid"]], []).append(e)
    return result


def check_tensor(by_track: Dict[str, List[dict]], name: str, nbytes: int) -> int:
    """The tensor's track has NEGOTIATE then COLLECTIVE, the latter naming it with its bytes; a
    COLLECTIVE of a fused batch (more than one tensor) comes between PACK and UNPACK, one of a
    single tensor stands alone. Returns the number of tensors in its latest batch."""
    assert name in by_track, f"no track for {name}; tracks: {sorted(by_track)[:20]}"
    events = by_track[name]
    kinds = [e["name"] for e in events]
    assert "NEGOTIATE" in kinds and "COLLECTIVE" in kinds, f"{name}: phases {kinds}"
    # The latest operation on the track with a COLLECTIVE: a bounded file may
    # have lost the start of the earliest one, a killed process's file may end
    # before the collective of the latest one.
    index = max(i for i, kind in enumerate(kinds) if kind == "COLLECTIVE")
    collective = events[index]
    earlier = [e for e in events[:index] if e["name"] == "NEGOTIATE"]
    assert earlier, f"{name}: no NEGOTIATE before its latest COLLECTIVE: {events[-4:]}"
    negotiate = earlier[-1]
    assert negotiate["ts"] + negotiate["dur"] <= collective["ts"], (
        f"{name}: collective before the end of negotiation: {events[-4:]}"
    )
    args = collective["args"]
    fused = args["fused"]
    truncated = fused[-1] == "..." and args["tensors"] > len(fused) - 1
    assert name in fused or truncated, f"{name}: not among the fused names {fused}"
    assert len(fused) == args["tensors"] or truncated, f"{name}: {args['tensors']} tensors but names {fused}"
    assert args["tensors"] >= 1 and args["bytes"] >= nbytes, f"{name}: args {args} (its own bytes: {nbytes})"
    if args["tensors"] == 1:
        assert args["bytes"] == nbytes, f"{name}: bytes {args['bytes']}, expected {nbytes}"
    check_fused_phases(events, name, index)
    return args["tensors"]


def check_fused_phases(events: List[dict], name: str, index: int) -> None:
    """events[index] is a COLLECTIVE: a fused batch has PACK just before it and UNPACK just
    after it on the track, end to end in time; a batch of one tensor has neither."""
    collective = events[index]
    before = events[index - 1] if index > 0 else None
    after = events[index + 1] if index + 1 < len(events) else None
    if collective["args"]["tensors"] == 1:
        assert not (before and before["name"] == "PACK") and not (after and after["name"] == "UNPACK"), (
            f"{name}: a batch of one tensor has no PACK or UNPACK: {events[max(0, index - 2) : index + 2]}"
        )
        return
    assert before is not None and before["name"] == "PACK", (
        f"{name}: fused batch without PACK before its COLLECTIVE: {events[max(0, index - 2) : index + 2]}"
    )
    assert after is not None and after["name"] == "UNPACK", (
        f"{name}: fused batch without UNPACK after its COLLECTIVE: {events[max(0, index - 2) : index + 2]}"
    )
    assert before["ts"] + before["dur"] == collective["ts"], (
        f"{name}: PACK {before} does not end where {collective} starts"
    )
    assert collective["ts"] + collective["dur"] == after["ts"], (
        f"{name}: UNPACK {after} does not start where {collective} ends"
    )
