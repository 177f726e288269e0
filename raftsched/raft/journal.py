"""A durable Raft journal for pysyncobj: plain append-only file, fsynced in groups.

pysyncobj 0.3.17's ``FileJournal`` is an mmap that is flushed only at shutdown, and its meta
file (term, vote, commit index) is replaced without fsync: kill -9 is safe (the page cache
survives), a host crash or power loss is not (pysyncobj #84). This journal keeps
pysyncobj's ``Journal`` interface and changes how it reaches the disk:

- ``raft.journal`` is an append-only file: a header, then records
  ``<u32 length><u32 crc32><u64 index><u64 term><command>`` (length covers index, term and
  command; the CRC covers the same bytes). ``add`` writes through ``os.write`` (page cache);
  ``flush`` fsyncs once for everything written since the last flush: a group commit.
- At start the records are read up to the first one that is torn or fails its CRC (what a
  power loss leaves after an interrupted write); the file is truncated there. Nothing past
  the last fsync was ever acknowledged, so nothing acknowledged is lost.
- ``clear`` (after pysyncobj installed a snapshot) first fsyncs the snapshot file
  (``raft.dump`` next to the journal; pysyncobj writes a received one without fsync) and its
  directory.
- ``deleteEntriesFrom`` (a follower drops a conflicting tail) truncates the file;
  ``deleteEntriesTo`` (log compaction) writes the kept entries to a new file, fsyncs it and
  renames it over the old one, then fsyncs the directory (which also makes pysyncobj's rename
  of the snapshot it just wrote durable).
- The meta file (``raft.journal.meta``, pysyncobj's format) is written to a temporary file,
  fsynced, renamed, and the directory fsynced: on ``setCurrentTerm`` (term and vote: before
  pysyncobj sends the vote or the vote request) and once a second for the commit index.
- ``getRaftCommitIndex`` never returns an index past the end of the journal (pysyncobj PR
  #197: a saved commit index past the journal's end deadlocks or over-applies at start): it
  is clamped, with a warning.
- A journal written by pysyncobj's ``FileJournal`` (its header starts with ``PYSYNCOBJ``) is
  read with pysyncobj's own reader and converted once, atomically.

When to fsync: off the tick thread, by a group-commit thread of the journal's own
(:mod:`raftsched.raft.journal_sync`); the node acts only on ``durable_index``.

``durable=False`` (``[cluster] durable_journal = false``) keeps the file format and skips every
fsync: as safe as pysyncobj's own journal (kill -9 yes, power loss no), and faster.

Test hook: with ``RAFTSCHED_TEST_JOURNAL_SYNCED=1`` in the environment, after each journal
fsync the durable length is written to ``raft.journal.synced``; a power-loss test truncates
the journal to it after kill -9.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from pysyncobj.journal import FileJournal, Journal
from pysyncobj.pickle import dumps, loads

from raftsched.raft.journal_sync import GroupCommit

log = logging.getLogger(__name__)

MAGIC = b"RAFTSCHED-JOURNAL-1\n"
_HEAD = struct.Struct("<II")  # length, crc32
_ENTRY = struct.Struct("<QQ")  # index, term
_PYSYNCOBJ_MAGIC = b"PYSYNCOBJ"
SYNCED_ENV = "RAFTSCHED_TEST_JOURNAL_SYNCED"
SLOW_FSYNC = 0.1  # seconds: an fsync this slow is logged
DUMP_NAME = "raft.dump"  # the node's snapshot, next to the journal (raft/settings.py)


def _fsync(fd: int) -> None:
    """The one place this module syncs a file: tests replace it to record the order."""
    os.fsync(fd)


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: temporary file, fsync, rename, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            _fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path)


def encode_record(command: bytes, idx: int, term: int) -> bytes:
    body = _ENTRY.pack(idx, term) + bytes(command)
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def read_records(data: bytes) -> tuple[list[tuple[bytes, int, int]], list[int], int]:
    """(entries, their offsets, length of the valid prefix) of a journal file's bytes."""
    entries: list[tuple[bytes, int, int]] = []
    offsets: list[int] = []
    pos = len(MAGIC)
    end = len(data)
    while pos + _HEAD.size <= end:
        length, crc = _HEAD.unpack_from(data, pos)
        start = pos + _HEAD.size
        if length < _ENTRY.size or start + length > end:
            break
        body = data[start : start + length]
        if zlib.crc32(body) != crc:
            break
        idx, term = _ENTRY.unpack_from(body, 0)
        if entries and idx != entries[-1][1] + 1:
            break
        entries.append((bytes(body[_ENTRY.size :]), idx, term))
        offsets.append(pos)
        pos = start + length
    return entries, offsets, pos


class DurableJournal(GroupCommit, Journal):
    def __init__(self, path: str, *, durable: bool = True) -> None:
        self.path = path
        self.meta_path = path + ".meta"
        self.dump_path = os.path.join(os.path.dirname(os.path.abspath(path)), DUMP_NAME)
        self.durable = durable
        self.fsyncs = 0  # journal fsyncs so far (status, tests)
        self.fsync_seconds = 0.0  # time spent in them
        self._synced_hook = os.environ.get(SYNCED_ENV, "").strip() not in ("", "0")
        self.fsync_delay = 0.0  # test hook (RAFTSCHED_TEST_FSYNC_DELAY): a slow disk
        # (proposed, previous) -> the commit index to take; set by the node (group_commit.py)
        self.commit_guard: Callable[[int, int], int] | None = None
        self._entries: list[tuple[bytes, int, int]] = []
        self._offsets: list[int] = []
        self._dirty = False
        self._meta: dict[str, Any] = self._load_meta()
        self._meta_dirty = False
        self._fd = -1
        self._init_group_commit()
        self._open()
        self._durable_index = self._last_index()
        # the commit index pysyncobj last took (it starts from getRaftCommitIndex, clamped)
        self._commit_taken = min(int(self._meta.get("raftCommitIndex", 1)), self._last_index() or 1)

    # -- opening -------------------------------------------------------------------------

    def _open(self) -> None:
        data = b""
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
        if data.startswith(_PYSYNCOBJ_MAGIC):
            self._convert_pysyncobj_journal()
            with open(self.path, "rb") as f:
                data = f.read()
        if not data.startswith(MAGIC):
            if data:
                raise RuntimeError(
                    f"{self.path} is not a raftsched journal (unknown header); move it away"
                    " and let the node catch up from the others, or rebuild the cluster with"
                    " `raftsched cluster rebuild --from-db`"
                )
            write_file_durably(self.path, MAGIC, durable=self.durable)
            data = MAGIC
        entries, offsets, valid = read_records(data)
        if valid < len(data):
            log.warning(
                "%s: dropping %d bytes after the last whole record (index %s): a write that"
                " was never acknowledged, cut off by a crash",
                self.path,
                len(data) - valid,
                entries[-1][1] if entries else "-",
            )
        self._entries, self._offsets = entries, offsets
        self._fd = os.open(self.path, os.O_RDWR)
        if valid < len(data):
            os.ftruncate(self._fd, valid)
            if self.durable:
                self._sync_fd()
        os.lseek(self._fd, 0, os.SEEK_END)

    def _convert_pysyncobj_journal(self) -> None:
        old = FileJournal(self.path)
        try:
            entries = [old[i] for i in range(len(old))]
        finally:
            old._destroy()
        log.info("%s: converting pysyncobj's journal (%d entries)", self.path, len(entries))
        body = MAGIC + b"".join(encode_record(*entry) for entry in entries)
        write_file_durably(self.path, body, durable=True)

    def _load_meta(self) -> dict[str, Any]:
        try:
            with open(self.meta_path, "rb") as f:
                meta = loads(f.read())
        except FileNotFoundError:
            return {}
        except Exception as err:
            log.warning("%s unreadable (%s): starting from term 0", self.meta_path, err)
            return {}
        return meta if isinstance(meta, dict) else {}

    # -- pysyncobj's Journal interface ---------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        record = encode_record(command, idx, term)
        offset = os.lseek(self._fd, 0, os.SEEK_END)
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view) :]
        self._entries.append((command, idx, term))
        self._offsets.append(offset)
        self._mark_dirty()

    def clear(self) -> None:
        # pysyncobj clears the journal right after it installed a snapshot (a received one is
        # written without fsync): make the snapshot durable before the entries it replaces go.
        if self.durable and os.path.exists(self.dump_path):
            fd = os.open(self.dump_path, os.O_RDONLY)
            try:
                _fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.dump_path)
        with self._sync_lock:
            self._entries = []
            self._offsets = []
            os.ftruncate(self._fd, len(MAGIC))
            self._truncated(0)
            self._note_cut(len(MAGIC))

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        cut = self._offsets[entryFrom] if entryFrom >= 0 else len(MAGIC)
        with self._sync_lock:
            keep_to = self._entries[entryFrom - 1][1] if entryFrom > 0 else 0
            del self._entries[entryFrom:]
            del self._offsets[entryFrom:]
            os.ftruncate(self._fd, cut)
            self._truncated(keep_to)
            self._note_cut(cut)

    def deleteEntriesTo(self, entryTo: int) -> None:
        kept = self._entries[entryTo:]
        chunks = [MAGIC]
        offsets = []
        pos = len(MAGIC)
        for entry in kept:
            record = encode_record(*entry)
            offsets.append(pos)
            chunks.append(record)
            pos += len(record)
        write_file_durably(self.path, b"".join(chunks), durable=self.durable)
        with self._sync_lock:
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_RDWR)
            os.lseek(self._fd, 0, os.SEEK_END)
            self._entries = kept
            self._offsets = offsets
            self._dirty = False
            # the new file is on disk as a whole: whatever an fsync running meanwhile on the
            # old file finds, it cannot add to that
            self._generation += 1
            self._durable_index = self._last_index()
        self._note_synced(pos)

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.stop_syncer()
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            self.flush()
            if self._meta_dirty:
                self._store_meta()
        with self._sync_lock:
            os.close(self._fd)
            self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self.commit_guard is not None:  # a leader counts itself only for what is on disk
            raftCommitIndex = self.commit_guard(raftCommitIndex, self._commit_taken)
        self._commit_taken = raftCommitIndex
        if self._meta.get("raftCommitIndex") != raftCommitIndex:
            self._meta["raftCommitIndex"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        saved = int(self._meta.get("raftCommitIndex", 1))
        last = self._entries[-1][1] if self._entries else 1
        if saved > last:
            # pysyncobj PR #197: a commit index past the journal's end (entries lost by a
            # crash of a node that ran without durable_journal) must not be trusted: the
            # leader tells this node the real commit index again.
            log.warning(
                "%s: saved commit index %d is past the end of the journal (%d): using %d;"
                " the leader will send the committed entries again",
                self.meta_path,
                saved,
                last,
                last,
            )
            return last
        return saved

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        # Raft: term and vote are on disk before any message that reflects them leaves.
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId", None)

    def onOneSecondTimer(self) -> None:
        if not self._meta_dirty:
            return
        if self._syncer is not None:
            with self._sync_lock:
                self._meta_wanted = True  # the syncer saves it, clamped to what is on disk
                self._sync_wanted.notify()
            return
        self.flush()  # the commit index saved never runs ahead of the journal on disk
        self._store_meta()

    # -- durability ----------------------------------------------------------------------

    def _sync_fd(self, fd: int | None = None, length: int | None = None) -> None:
        fd = self._fd if fd is None else fd
        began = time.monotonic()
        if self.fsync_delay > 0:
            time.sleep(self.fsync_delay)
        _fsync(fd)
        took = time.monotonic() - began
        self.fsyncs += 1
        self.fsync_seconds += took
        if took > SLOW_FSYNC:
            log.warning(
                "%s: fsync took %.0f ms (the disk is slow or busy; %s)",
                self.path,
                took * 1000,
                "acknowledgements waited for it"
                if self._syncer is not None
                else "the Raft tick waited, and heartbeats with it",
            )
        if length is None:  # inline (at open); the group commit notes it once counted
            self._note_synced(os.lseek(fd, 0, os.SEEK_END))

    def _store_meta(self) -> None:
        with self._meta_lock:  # the syncer and the tick thread (a vote) never interleave
            self._meta_dirty = False
            meta = dict(self._meta)
            if self._syncer is not None and "raftCommitIndex" in meta:
                # the saved commit index never runs ahead of the journal on disk
                durable = self.durable_index
                if meta["raftCommitIndex"] > durable:
                    meta["raftCommitIndex"] = durable
                    self._meta_dirty = True  # saved again at the next one-second timer
            write_file_durably(self.meta_path, dumps(meta), durable=self.durable)


def entries_of(path: str) -> list[tuple[bytes, int, int]]:
    """The entries of a journal file (either format), read-only."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(_PYSYNCOBJ_MAGIC):
        old = FileJournal(path)
        try:
            return [old[i] for i in range(len(old))]
        finally:
            old._destroy()
    return read_records(data)[0]
