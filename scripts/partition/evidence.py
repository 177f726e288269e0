"""What the partition suite prints when the cluster never settled: a CI log may be all we get.

The nodes behind come first, and for each its distinct tracebacks (newest first, with how
often each occurred: a tick thread that fails on every resend logs the same one hundreds of
times), then its last warnings and its threads' stacks (``kill -USR1``: faulthandler). The
nodes that did settle follow, briefly. The CI test keeps the start of this text, not its tail:
a long stack dump once pushed the tick thread's traceback out of its 16-KB excerpt.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Sequence
from typing import Any

MARK = "the cluster never settled"  # the first line printed; the CI test excerpts from it
STATUS_KEYS = (
    "role",
    "term",
    "leader",
    "commit_index",
    "applied_index",
    "apply_error",
    "fatal_error",
    "db_watermark",
    "outbox_last_seq",
    "outbox_acked_seq",
)
# a log record of raftsched's text format ("2026-12-03 21:57:44,906 ERROR ..."), a fault mark
# of the suite, or a faulthandler dump: what ends a traceback in a node's log
_RECORD = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d|--- \d\d:\d\d|Thread 0x|Current thread)")
_LOUD = ("WARNING", "ERROR", "CRITICAL")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")


def tracebacks(lines: Sequence[str], limit: int = 3, tail: int = 30) -> list[str]:
    """The last ``limit`` distinct tracebacks in a node's log lines, newest first: each the
    record that logged it, how often it occurred (distinct by its last line, the exception),
    and its last ``tail`` lines (the innermost frames and the exception)."""
    seen: dict[str, tuple[int, int, list[str]]] = {}  # exception line -> (count, last, block)
    i, n = 0, len(lines)
    while i < n:
        if not lines[i].startswith("Traceback (most recent call last):"):
            i += 1
            continue
        start = i - 1 if i > 0 and any(w in lines[i - 1] for w in _LOUD) else i
        end = i + 1
        while end < n and _continues(lines, end):
            end += 1
        block = [ln for ln in lines[start:end] if ln.strip()]
        key = block[-1] if block else ""
        count = seen[key][0] + 1 if key in seen else 1
        seen[key] = (count, start, block)
        i = end
    newest = sorted(seen.values(), key=lambda v: v[1], reverse=True)[:limit]
    out = []
    for count, _, block in newest:
        head, body = block[0], block[1:]
        out.append(f"{count}x {head[:300]}")
        if len(body) > tail:
            out.append(f"  ... {len(body) - tail} lines")
        out.extend(f"  {ln[:300]}" for ln in body[-tail:])
    return out


def _continues(lines: Sequence[str], j: int) -> bool:
    """Line ``j`` still belongs to the traceback above it: not a new record, and a new
    "Traceback" only when chained ("During handling of the above exception", a blank line)."""
    line = lines[j]
    if _RECORD.match(line):
        return False
    if line.startswith("Traceback"):
        before = [ln for ln in lines[max(0, j - 2) : j] if ln.strip()]
        return bool(before) and before[-1].startswith(_CHAIN)
    return True


def unsettled_evidence(cluster: Any, raw: dict[int, Any], lines: int = 6) -> str:
    """The text printed under :data:`MARK` (see the module docstring)."""
    applied = [s.get("applied_index") or 0 for s in raw.values() if s]
    top = max(applied, default=0)
    behind = [i for i, s in raw.items() if not s or (s.get("applied_index") or 0) < top]
    for i in behind:
        cluster._signal(i, signal.SIGUSR1)
    if behind:
        time.sleep(1.0)
    out = [f"{MARK}: see the node logs in {getattr(cluster, 'log_dir', '?')}"]
    for i in [*behind, *(i for i in raw if i not in behind)]:
        status = raw[i]
        name = cluster.names[i]
        facts = {k: status.get(k) for k in STATUS_KEYS} if status else "no answer"
        out.append(f"{name}{' (BEHIND)' if i in behind else ''}: {facts}")
        try:
            text = cluster.log_path(i).read_text(errors="replace").splitlines()
        except OSError as err:
            out.append(f"  (no log: {err})")
            continue
        if i in behind:
            found = tracebacks(text)
            out.append(f"  tracebacks, newest first: {'none' if not found else ''}")
            out.extend(f"  {ln}" for ln in found)
        loud = [ln for ln in text if any(w in ln for w in _LOUD)]
        out.extend(f"  {ln[:200]}" for ln in loud[-lines:])
        starts = [n for n, ln in enumerate(text) if ln.startswith(("Thread 0x", "Current thread"))]
        if i in behind and starts:
            out.append("  stacks:")
            out.extend(f"  {ln[:160]}" for ln in text[starts[0] :][:80] if ln.strip())
        else:
            out.extend(f"  | {ln[:200]}" for ln in text[-3:])
    return "\n".join(out)


def excerpt(stderr: str, limit: int = 16_000) -> str:
    """``limit`` characters of a run's stderr: from :data:`MARK` on when it is there (the
    evidence, behind nodes first), else its tail."""
    at = stderr.find(MARK)
    return stderr[at : at + limit] if at >= 0 else stderr[-limit:]
