"""`raftsched debug replay DATA_DIR`: a node's data dir replayed offline (no network, no DB).

Loads the node's snapshot, applies every committed journal entry in the pure core (the same
``apply`` the node ran), prints each decision, and checks the state digest against the one
the node recorded when it stopped (``raft.digest``). Exit 0 when the digest matches or none
was recorded within the replayed range (the summary says which), 1 when it differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime
from typing import Any

from raftsched.cli.output import add_output_flag
from raftsched.errors import ConfigError

EXIT_OK = 0
EXIT_MISMATCH = 1


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    debug = sub.add_parser("debug", help="tools for bug reports")
    debug_sub = debug.add_subparsers(dest="debug_command", metavar="COMMAND", required=True)
    replay = debug_sub.add_parser(
        "replay",
        help="replay a node's snapshot and journal offline and check its state digest",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    replay.add_argument(
        "data_dir",
        metavar="DATA_DIR",
        help="a node's directory (holding raft.journal), or a data dir with one node's",
    )
    replay.add_argument("--dag", metavar="DAG_ID", help="print only decisions about this DAG")
    replay.add_argument(
        "--from",
        dest="start",
        metavar="INDEX|TIME",
        help="print only decisions from this log index, or proposed at/after this ISO time",
    )
    replay.add_argument("--to", dest="end", metavar="INDEX|TIME", help="... up to this one")
    add_output_flag(replay)
    replay.set_defaults(handler=cmd_replay)


def _bound(text: str | None, flag: str) -> int | datetime | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r} is neither a log index nor an ISO 8601 time"
            " (e.g. 1200 or 2026-12-04T18:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise ConfigError(f"{flag} {text!r} has no time zone: add Z or +00:00")
    return when


def _within(decision: Any, start: Any, end: Any, dag: str | None) -> bool:
    if dag is not None and dag not in decision.dag_ids:
        return False
    for bound, after in ((start, True), (end, False)):
        if bound is None:
            continue
        if isinstance(bound, int):
            here: Any = decision.index
        elif decision.at:
            here = datetime.fromisoformat(decision.at)
        else:
            return False  # Raft's own entries carry no time
        if (here < bound) if after else (here > bound):
            return False
    return True


def _line(d: Any) -> str:
    subject = ",".join(d.dag_ids) or "-"
    if d.run_id:
        subject += f"/{d.run_id}"
    if d.task_id:
        subject += f"/{d.task_id}"
    verdict = "ok" if d.ok else f"refused: {d.reason}"
    if d.ok and d.reason:
        verdict = f"ok ({d.reason})"
    changed = "; ".join(d.changes)
    return f"{d.index:>8} t{d.term} {d.command} {subject} {verdict}" + (
        f" | {changed}" if changed else ""
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from raftsched.cluster.replay import replay

    start, end = _bound(args.start, "--from"), _bound(args.end, "--to")
    shown: list[dict[str, Any]] = []
    as_json = args.output == "json"

    def on_decision(decision: Any) -> None:
        if not _within(decision, start, end, args.dag):
            return
        if as_json:
            shown.append(dataclasses.asdict(decision))
        else:
            print(_line(decision))

    report = replay(args.data_dir, on_decision)
    check = report.check
    digest = {
        "replayed_to": report.applied_to,
        "digest": report.digest,
        "recorded_index": check.index if check else None,
        "recorded": check.recorded if check else None,
        "replayed_at_recorded_index": check.replayed if check else None,
        "matches": check.matches if check else None,
    }
    runs = [
        {"dag_id": dag_id, "run_id": run_id, "state": state or None}
        for (dag_id, run_id), state in sorted(report.runs.items())
    ]
    if as_json:
        payload = {
            "node_dir": str(report.node_dir),
            "snapshot_index": report.snapshot_index,
            "not_applied": report.not_applied,
            "decisions": shown,
            "runs": runs,
            "digest": digest,
        }
        json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        _summary(report, runs)
    return EXIT_MISMATCH if check is not None and check.matches is False else EXIT_OK


def _summary(report: Any, runs: list[dict[str, Any]]) -> None:
    print(f"-- runs ({len(runs)}; state '-' = finished and no longer in the state's memory)")
    for run in runs:
        print(f"--   {run['dag_id']}/{run['run_id']} {run['state'] or '-'}")
    print(
        f"-- replayed {report.node_dir}: snapshot at {report.snapshot_index}, applied to"
        f" {report.applied_to}, digest {report.digest}"
    )
    if report.not_applied:
        print(f"-- {report.not_applied} entries past the commit index not applied")
    check = report.check
    if check is None:
        print("-- digest not checked: the node recorded none (it writes raft.digest when it stops)")
    elif check.matches is None:
        print(
            f"-- digest not checked: recorded at index {check.index}, outside the replayed"
            f" range ({report.snapshot_index}..{report.applied_to})"
        )
    elif check.matches:
        print(f"-- digest matches the one recorded at index {check.index}: {check.recorded}")
    else:
        print(
            f"-- DIGEST DIFFERS at index {check.index}: recorded {check.recorded}, replayed"
            f" {check.replayed}. Keep this data dir and report it: the replay is not the state"
            " the node had"
        )
