"""A node's Raft files read offline, read-only: ``raftsched debug replay`` and bug reports.

Nothing here opens a journal for writing (``DurableJournal`` truncates a torn tail on open:
a copied data dir must stay as it was shipped). pysyncobj's entry encoding is known only
here and in the engine: a command is one type byte (``0`` regular, ``1`` no-op, ``2``
membership, ``3`` version) and, for a regular one, pickle of ``(method id, args)`` (and
``kwargs`` when there are some) whose first argument is the scheduler's command.

The digest stamp (``raft.digest``, JSON ``{"format", "index", "digest"}``) is written by a
node when it closes: the state digest at the last entry it applied. It is not replicated and
never read by a running node; a digest at index N is the same on every replica and forever,
so a stamp left by an earlier close still checks a replay that passes N.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftsched.errors import NotANodeDir
from raftsched.raft.journal import MAGIC, read_records, write_file_durably
from raftsched.raft.settings import DUMP_FILE, JOURNAL_FILE
from raftsched.raft.snapshots import read_snapshot_file

DIGEST_FILE = "raft.digest"
DIGEST_FORMAT = 1
_REGULAR, _NO_OP, _MEMBERSHIP, _VERSION = 0, 1, 2, 3
_KINDS = {_NO_OP: "raft no-op", _MEMBERSHIP: "raft membership", _VERSION: "raft version"}


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    command: Any  # the scheduler's command, or None for Raft's own entries
    kind: str  # "command", or what Raft's own entry is


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    index: int  # the last log index the state includes
    state: dict[str, Any]  # SchedulerState.snapshot()


def find_node_dir(path: str | Path) -> Path:
    """``path`` itself when it holds a journal, else its one node subdirectory
    (``<data_dir>/<host>_<port>/``)."""
    path = Path(path)
    if (path / JOURNAL_FILE).exists():
        return path
    found = sorted(p.parent for p in path.glob(f"*/{JOURNAL_FILE}"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotANodeDir(f"{path}: no {JOURNAL_FILE} here nor in a node directory under it")
    names = ", ".join(p.name for p in found)
    raise NotANodeDir(f"{path} holds several nodes' directories ({names}): name one of them")


def read_snapshot(node_dir: Path) -> SnapshotFile | None:
    """The node's snapshot, or None when it has none; ValueError for another format."""
    path = node_dir / DUMP_FILE
    if not path.exists():
        return None
    try:
        payload = read_snapshot_file(str(path))
        return SnapshotFile(index=int(payload["raft"][0][1]), state=payload["state"])
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, IndexError, TypeError) as err:
        raise ValueError(f"{path} is not a readable snapshot ({err})") from err


def read_entries(node_dir: Path) -> Iterator[Entry]:
    """The journal's whole records in order, up to the first torn or corrupt one."""
    data = (node_dir / JOURNAL_FILE).read_bytes()
    if not data.startswith(MAGIC):
        head = data[:24]
        raise NotANodeDir(
            f"{node_dir / JOURNAL_FILE} is not a journal of this format (header {head!r},"
            f" expected {MAGIC!r}): replay it with the raftsched release that wrote it"
        )
    entries, _offsets, _valid = read_records(data)
    for raw, index, term in entries:
        yield _decode(raw, index, term)


def commit_index(node_dir: Path) -> int | None:
    """The commit index the node last saved (at most a second old), or None."""
    try:
        meta = pickle.loads((node_dir / (JOURNAL_FILE + ".meta")).read_bytes())
        return int(meta["raftCommitIndex"])
    except (OSError, KeyError, TypeError, ValueError, pickle.UnpicklingError, EOFError):
        return None


def _decode(raw: bytes, index: int, term: int) -> Entry:
    kind = raw[0] if raw else _NO_OP
    if kind != _REGULAR:
        return Entry(index, term, None, _KINDS.get(kind, f"raft entry type {kind}"))
    call = pickle.loads(raw[1:])  # method id, or (id, args), or (id, args, kwargs)
    args = call[1] if isinstance(call, tuple) and len(call) > 1 else ()
    return Entry(index, term, args[0] if args else None, "command")


def write_digest_stamp(node_dir: Path, index: int, digest: str, durable: bool = True) -> None:
    """Record (index, digest); fsynced only with a durable journal (a node whose journal is
    not durable fsyncs nothing). A torn stamp reads as none."""
    body = json.dumps({"format": DIGEST_FORMAT, "index": index, "digest": digest})
    path = node_dir / DIGEST_FILE
    if durable:
        write_file_durably(str(path), body.encode() + b"\n")
        return
    part = path.with_name(path.name + ".part")
    part.write_text(body + "\n")
    os.replace(part, path)


def read_digest_stamp(node_dir: Path) -> tuple[int, str] | None:
    """(index, digest) the node recorded when it last closed, or None."""
    try:
        stamp = json.loads((node_dir / DIGEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != DIGEST_FORMAT:
        return None
    return int(stamp["index"]), str(stamp["digest"])
