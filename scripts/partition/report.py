"""The JSON report of one partition run, and its exit code.

Layout (``schema_version`` 1)::

    {"schema_version": 1, "verdict": "PASS" | "FAIL", "seed": 7, "profile": "short",
     "started_at": iso, "finished_at": iso, "environment": {...},
     "timeline": [{"t": 12.3, "wall": iso, "nemesis": "isolate-leader", "action": "start",
                   "details": {...}}, ...],
     "leader_changes": [{"t": 3.1, "wall": iso, "leader": "10.77.3.11:7101", "term": 2}],
     "counts": {"runs": 120, "attempts": 0, ...},
     "invariants": [Verdict.to_dict(), ...],
     "violations": [{"invariant": ..., "kind": ..., "detail": ..., "data": {...}}, ...]}

Exit code: 0 when every invariant passes, 1 on any violation (2 is left to usage errors).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts.partition.verdict import Verdict

SCHEMA_VERSION = 1
EXIT_PASS = 0
EXIT_VIOLATION = 1


def build(
    verdicts: Iterable[Verdict],
    *,
    seed: int,
    profile: str,
    timeline: Sequence[Mapping[str, Any]] = (),
    leader_changes: Sequence[Mapping[str, Any]] = (),
    counts: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
    started_at: datetime | None = None,
) -> dict[str, Any]:
    verdicts = list(verdicts)
    invariants = [v.to_dict() for v in verdicts]
    violations = [
        {"invariant": v["invariant"], **violation}
        for v in invariants
        for violation in v["violations"]
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": "PASS" if not violations else "FAIL",
        "seed": seed,
        "profile": profile,
        "started_at": started_at.isoformat() if started_at else None,
        "finished_at": datetime.now(UTC).isoformat(),
        "environment": dict(environment or {}),
        "timeline": [dict(event) for event in timeline],
        "leader_changes": [dict(change) for change in leader_changes],
        "counts": dict(counts or {}),
        "invariants": invariants,
        "violations": violations,
    }


def write(report: Mapping[str, Any], path: Path | str) -> None:
    Path(path).write_text(json.dumps(report, indent=2, sort_keys=False, default=str) + "\n")


def exit_code(report: Mapping[str, Any]) -> int:
    return EXIT_PASS if report["verdict"] == "PASS" and not report["violations"] else EXIT_VIOLATION


def summary(report: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in report["counts"].items())
    faults = sum(1 for e in report["timeline"] if e.get("action") == "start")
    return (
        f"{report['verdict']}: seed {report['seed']}, profile {report['profile']},"
        f" {faults} faults, {len(report['leader_changes'])} leader changes, {counts};"
        f" {len(report['violations'])} violations"
    )
