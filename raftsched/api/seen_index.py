"""What a client has seen of the cluster, and how one call carries it (client/README "Consistency").

:class:`SeenIndex` is the highest Raft log index a caller has seen or caused, kept in a file
per user and cluster (:func:`seen_index_path`) so separate CLI invocations share it. ``_View``
is one call's consistency: the trackers it sends as ``x-raftsched-min-index`` and feeds from
the answer, and the consistency mode asked for. Re-exported by :mod:`raftsched.api.client`.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from raftsched.api.consistency import (
    APPLIED_TRAILER,
    CONSISTENCY_HEADER,
    LINEARIZABLE,
    MIN_INDEX_HEADER,
    RESET_TRAILER,
)

log = logging.getLogger(__name__)

SEEN_INDEX_ENV = "RAFTSCHED_SEEN_INDEX_FILE"
SEEN_FILE_PREFIX = "seen-index-"
MAX_SEEN_FILES = 32


class SeenIndex:
    """The highest Raft log index a caller has seen (read) or caused (written). Thread-safe.

    ``load``/``save`` keep it in a small file, so separate processes of one caller (CLI
    invocations) share it."""

    def __init__(self, value: int = 0) -> None:
        self._lock = threading.Lock()
        self._value = max(0, int(value))
        self._was_reset = False

    @property
    def value(self) -> int:
        with self._lock:
            return self._value

    def observe(self, index: int) -> None:
        with self._lock:
            self._value = max(self._value, int(index))

    def reset(self, index: int, sent: int) -> None:
        """A leader served ``sent`` although its whole log is shorter: the cluster was
        re-created; start again from ``index`` unless a newer answer came meanwhile."""
        with self._lock:
            if self._value <= sent:
                self._value = int(index)
                self._was_reset = True

    @classmethod
    def load(cls, path: Path) -> SeenIndex:
        try:
            return cls(int(path.read_text().strip() or 0))
        except (OSError, ValueError):
            return cls()

    def save(self, path: Path) -> None:
        """Best effort: a caller that cannot write it only loses what it saw before."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Under a lock, and never lower than what the file holds: two CLI commands run at
            # once must not make the slower one's save undo the faster one's newer index
            # (unless this caller saw the cluster re-created).
            with open(path.with_name(f"{path.name}.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                value = self.value
                if not self._was_reset:
                    value = max(value, SeenIndex.load(path).value)
                tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}")
                tmp.write_text(f"{value}\n")
                tmp.replace(path)
            if path.name.startswith(SEEN_FILE_PREFIX):
                _prune_seen_files(path.parent)
        except OSError as err:
            log.debug("cannot save the seen index to %s: %s", path, err)

    def __repr__(self) -> str:
        return f"SeenIndex({self.value})"


def seen_index_path(servers: Sequence[str], env: Mapping[str, str] | None = None) -> Path | None:
    """Where one user's CLI keeps the index it has seen of the cluster at ``servers``:
    ``$RAFTSCHED_SEEN_INDEX_FILE`` (empty: nowhere), else a file per server list under
    ``$XDG_STATE_HOME/raftsched`` (default ``~/.local/state/raftsched``)."""
    env = os.environ if env is None else env
    if SEEN_INDEX_ENV in env:
        return Path(env[SEEN_INDEX_ENV]) if env[SEEN_INDEX_ENV] else None
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    key = hashlib.sha256(",".join(sorted(servers)).encode()).hexdigest()[:16]
    return base / "raftsched" / f"{SEEN_FILE_PREFIX}{key}"


def _prune_seen_files(folder: Path) -> None:
    """Keep the MAX_SEEN_FILES most recently used clusters' files (tests make many)."""
    files = sorted(folder.glob(f"{SEEN_FILE_PREFIX}*"), key=lambda p: p.stat().st_mtime)
    for old in files[:-MAX_SEEN_FILES]:
        old.unlink(missing_ok=True)


@dataclass(frozen=True)
class _View:
    """One call's consistency: the trackers it reads and feeds, and the mode asked for."""

    trackers: tuple[SeenIndex, ...]
    consistency: str

    def floor(self) -> int:
        return max((t.value for t in self.trackers), default=0)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        out: tuple[tuple[str, str], ...] = ()
        floor = self.floor()
        if floor:
            out += ((MIN_INDEX_HEADER, str(floor)),)
        if self.consistency:
            out += ((CONSISTENCY_HEADER, self.consistency),)
        return out

    def answered(self, sent: int, index: int, trailer: Sequence[Any] | None) -> None:
        """Remember the answer's index (the larger of its freshness and its trailer)."""
        reset = False
        for key, value in trailer or ():
            if key == APPLIED_TRAILER and str(value).isdigit():
                index = max(index, int(value))
            elif key == RESET_TRAILER:
                reset = True
        for tracker in self.trackers:
            if reset:
                tracker.reset(index, sent)
            else:
                tracker.observe(index)


def _check_consistency(value: str) -> str:
    value = (value or "").strip().lower()
    if value not in ("", LINEARIZABLE):
        raise ValueError(f"consistency = {value!r}: expected '' or {LINEARIZABLE!r}")
    return value


def _freshness_index(response: Message) -> int:
    if "freshness" in type(response).DESCRIPTOR.fields_by_name and response.HasField("freshness"):
        return int(response.freshness.applied_index)  # type: ignore[attr-defined]
    return 0
