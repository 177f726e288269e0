"""The wall clock every raftsched process stamps commands and decisions with.

One function instead of ``datetime.now(UTC)`` scattered around, so that a test can offset
one node's clock (the kernel clock cannot differ per network namespace): the partition
suite's clock-skew nemesis writes a number of seconds to the file named by
``RAFTSCHED_TEST_CLOCK_OFFSET_FILE`` (read when set, at most once a second; never set in
production), and every ``now()`` of that process is shifted by it. The replicated state
machine reads no clock at all: time reaches it inside commands, and it keeps a monotone
clock of its own (``core.state``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from datetime import UTC, datetime, timedelta

OFFSET_FILE_ENV = "RAFTSCHED_TEST_CLOCK_OFFSET_FILE"
MAX_OFFSET_SECONDS = 3600.0

_lock = threading.Lock()
_offset = 0.0
_read_at = -math.inf


def now() -> datetime:
    """The current time, aware UTC (plus the test offset, if one is set)."""
    return datetime.now(UTC) + timedelta(seconds=offset())


def offset() -> float:
    """Seconds added to the real clock in this process (0 unless a test set a file)."""
    path = os.environ.get(OFFSET_FILE_ENV)
    if not path:
        return 0.0
    global _offset, _read_at
    with _lock:
        if time.monotonic() - _read_at >= 1.0:
            _read_at = time.monotonic()
            _offset = _read_offset(path)
        return _offset


def _read_offset(path: str) -> float:
    try:
        with open(path) as src:
            value = float(src.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0
    if not math.isfinite(value):
        return 0.0
    return max(-MAX_OFFSET_SECONDS, min(MAX_OFFSET_SECONDS, value))
