"""Live workers and their queues (cluster/workers_seen.py): what a node publishes in its
heartbeat row, and what a reader makes of every node's rows."""

from __future__ import annotations

from raftsched.cluster import workers_seen as ws


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_node_publishes_the_workers_it_saw_lately() -> None:
    clock = Clock()
    seen = ws.WorkersSeen(clock)
    seen.seen("w1", ["gpu", "default", "gpu"])
    clock.now += 10
    seen.seen("w2", ["io"])
    assert seen.published() == {
        "w1": {"queues": ["default", "gpu"], "seen": 1000.0},
        "w2": {"queues": ["io"], "seen": 1010.0},
    }
    clock.now += ws.LIVE_SECONDS - 5  # w1 was seen LIVE_SECONDS + 5 ago: it is gone
    assert list(seen.published()) == ["w2"]


def test_a_node_remembers_a_bounded_number_of_workers() -> None:
    clock = Clock()
    seen = ws.WorkersSeen(clock)
    for i in range(ws.MAX_WORKERS + 10):
        seen.seen(f"w{i}", ["default"])
    published = seen.published()
    assert len(published) == ws.MAX_WORKERS and "w0" not in published


def test_readers_merge_every_nodes_rows_and_skip_what_is_malformed() -> None:
    now = 5000.0
    old = now - ws.LIVE_SECONDS - 1
    rows = [
        {"w1": {"queues": ["gpu"], "seen": now - 1}, "w3": {"queues": ["io"], "seen": old}},
        {"w1": {"queues": ["default"], "seen": now - 20}, "w2": {"queues": ["io"], "seen": now}},
        None,  # a row written before queues existed
        {"bad": "not a dict", "w4": {"queues": "gpu", "seen": now}, "w5": {"seen": now}},
        ["not", "a", "mapping"],
    ]
    workers = ws.live_workers(rows, now)  # type: ignore[arg-type]
    assert workers == {"w1": ("gpu",), "w2": ("io",)}  # w1's latest sighting wins
    served = ws.served_queues(workers)
    assert served == frozenset({"gpu", "io"})
    assert ws.waiting_note("gpu", served) == ""
    assert ws.waiting_note("default", served) == "no live worker serves queue 'default'"
    assert ws.waiting_note("default", None) == ""  # unknown: no note


INFO = {"host": "h1", "pid": 42, "version": "0.2.0", "slots": 4}


def test_signed_off_and_silent_workers_are_lost_with_why() -> None:
    clock = Clock()
    seen = ws.WorkersSeen(clock)
    seen.seen("w1", ["default"], INFO)
    seen.seen("w2", ["io"])
    seen.seen("w1", ["default"])  # a call without info keeps what it said before
    clock.now += 1
    seen.gone("w1", "stopped (SIGTERM)")
    assert list(seen.published()) == ["w2"]
    assert seen.lost()["w1"] == {
        **INFO,
        "queues": ["default"],
        "seen": 1000.0,
        "at": 1001.0,
        "reason": "stopped (SIGTERM)",
        "silent": False,
    }
    clock.now += ws.LIVE_SECONDS  # w2 fell silent
    lost = seen.lost()
    assert lost["w2"]["reason"] == ws.SILENT and lost["w2"]["silent"]
    assert seen.published() == {}
    seen.gone("w9", "died")  # a sign-off for a worker this node never saw
    assert seen.lost()["w9"]["seen"] is None and seen.lost()["w9"]["queues"] == []
    seen.seen("w1", ["default"])  # restarted under the same id: live again
    assert list(seen.lost()) == ["w2", "w9"]
    clock.now += ws.LOST_SECONDS + 1  # w2's loss is forgotten; w1 fell silent meanwhile
    assert list(seen.lost()) == ["w1"] and seen.published() == {}


def test_the_roster_merges_nodes_and_a_later_sighting_undoes_a_loss() -> None:
    now = 5000.0
    published = [
        {"w1": {**INFO, "queues": ["default"], "seen": now - 2}},  # node A
        {"w3": {"queues": ["io"], "seen": now - 1}, "w4": {"queues": [], "seen": now - 9}},  # B
        "garbage",
    ]
    lost = [
        {  # node A: w3 fell silent there (it moved to B since), w4 signed off after B saw it
            "w3": {"queues": [], "seen": now - 40, "at": now - 5, "reason": "x", "silent": True},
            "w4": {
                "queues": [],
                "seen": now - 50,
                "at": now - 3,
                "reason": "died",
                "silent": False,
            },
            "w5": {"queues": [], "seen": now - 90, "at": now - 60, "reason": "old", "silent": True},
            "w6": {"queues": [], "at": now - ws.LOST_SECONDS - 1, "reason": "gone long ago"},
            "bad": {"at": "yesterday"},
        },
        None,
    ]
    live, gone = ws.roster(published, lost, now)
    assert list(live) == ["w1", "w3"] and live["w1"]["host"] == "h1"
    assert list(gone) == ["w4", "w5"]  # most recent loss first
    assert gone["w4"]["reason"] == "died" and gone["w4"]["seen"] == now - 9  # B's sighting
