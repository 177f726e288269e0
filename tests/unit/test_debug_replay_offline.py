"""`raftsched debug replay` on data dirs written here (no cluster): what it refuses, and what
it says when the node recorded no digest. The replay of a real cluster's data dir is
tests/integration/test_debug_replay.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched.cli.main import main
from raftsched.cluster.replay import replay
from raftsched.core.state import SchedulerState
from raftsched.errors import ReplayRefused, SnapshotVersionError
from raftsched.raft.offline import write_digest_stamp
from raftsched.raft.snapshots import write_starting_point

NODES = ["127.0.0.1:7001"]


def _node(tmp_path: Path, state: dict | None = None, name: str = "127.0.0.1_7001") -> Path:
    node_dir = tmp_path / name
    write_starting_point(node_dir, NODES, state or SchedulerState().snapshot(), 50, durable=False)
    return node_dir


def test_a_snapshot_alone_replays_and_says_no_digest_was_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _node(tmp_path)
    assert main(["debug", "replay", str(tmp_path)]) == 0  # the data dir of one node
    out = capsys.readouterr().out
    assert "snapshot at 50" in out
    assert "digest not checked: the node recorded none" in out


def test_a_recorded_digest_is_checked_at_its_index(tmp_path: Path) -> None:
    node_dir = _node(tmp_path)
    digest = SchedulerState().digest()
    write_digest_stamp(node_dir, 0, digest)  # the empty state's applied index
    report = replay(node_dir, lambda _decision: None)
    assert report.check is not None and report.check.matches is True
    write_digest_stamp(node_dir, 0, "f" * len(digest))
    assert replay(node_dir, lambda _decision: None).check.matches is False  # type: ignore[union-attr]


def test_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ReplayRefused, match=r"no raft\.journal"):
        replay(tmp_path, lambda _decision: None)
    _node(tmp_path)
    _node(tmp_path, name="127.0.0.1_7002")
    with pytest.raises(ReplayRefused, match="several nodes"):
        replay(tmp_path, lambda _decision: None)
    newer = SchedulerState().snapshot()
    newer["schema_version"] = 10_000
    with pytest.raises(SnapshotVersionError, match="upgrade raftsched"):
        replay(_node(tmp_path / "newer", newer), lambda _decision: None)
    journal = _node(tmp_path / "other") / "raft.journal"
    journal.write_bytes(b"SOMETHING-ELSE\n")
    with pytest.raises(ReplayRefused, match="not a journal of this format"):
        replay(journal.parent, lambda _decision: None)


def test_a_skip_decision_is_described_as_skipped_slots_not_as_a_run() -> None:
    from datetime import UTC, datetime

    from raftsched.cluster.replay import _describe
    from raftsched.core.commands import CreateRuns, RunDecision
    from raftsched.core.results import Item, Result

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    skip = RunDecision("d", t1, t0, t1, skip_reason="paused", skipped_slots=525_600)
    run = RunDecision("d", t1, t1, t1)
    command = CreateRuns(request_id="r", now=t1, runs=(skip, run))
    result = Result.of_items([Item(True, "", "paused"), Item(True, "", "scheduled__x")])
    described = _describe(5, 2, command, result)
    assert described.changes == (
        f"slots skipped d {t0.isoformat()} to {t1.isoformat()} (paused)",
        "run created d/scheduled__x",
    )
