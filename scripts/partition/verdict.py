"""Verdicts: what one check says about one invariant, with the violations it found.

A ``Verdict`` counts what it ``checked`` (a PASS over nothing is a warning sign: the attempt
checks turn it into a VACUOUS violation), carries ``notes`` for context, and ``violations``,
each with a kind, a readable detail and the rows involved (datetimes as ISO text, so the
report is plain JSON).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

INVARIANTS: dict[str, str] = {
    "one_run_per_slot": "1. one run per schedule slot",
    "one_holder_per_attempt": "2. one holder per attempt",
    "dispatch_only_after_commit": "3. dispatch only after commit",
    "nothing_committed_lost": "4. nothing committed is lost",
    "replicas_agree": "5. replicas agree",
    "due_runs_finish": "6. due runs finish (liveness)",
    "clients_never_go_back": "7. a client never reads from behind what it has seen",
    "firings_consumed_once": "8. every committed firing is consumed exactly once",
    "assets_consumed_once": "9. every asset event is consumed exactly once",
}


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    invariant: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def title(self) -> str:
        return INVARIANTS[self.invariant]

    def add(self, kind: str, detail: str, **data: Any) -> None:
        self.violations.append(Violation(kind, detail, {k: _plain(v) for k, v in data.items()}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "title": self.title,
            "verdict": "PASS" if self.ok else "FAIL",
            "checked": self.checked,
            "notes": list(self.notes),
            "violations": [asdict(v) for v in self.violations],
        }


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, tuple | list | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def all_ok(verdicts: Iterable[Verdict]) -> bool:
    return all(v.ok for v in verdicts)


def format_verdicts(verdicts: Iterable[Verdict], *, max_details: int = 10) -> str:
    lines = []
    for v in verdicts:
        lines.append(
            f"{'PASS' if v.ok else 'FAIL'}  {v.title}  (checked {v.checked},"
            f" violations {len(v.violations)})"
        )
        lines += [f"      note: {note}" for note in v.notes]
        for violation in v.violations[:max_details]:
            lines.append(f"      {violation.kind}: {violation.detail}")
        if len(v.violations) > max_details:
            lines.append(f"      ... and {len(v.violations) - max_details} more")
    return "\n".join(lines)
