"""Group commit off the tick thread: the journal's own fsync thread and ``durable_index``.

When to fsync: off the tick thread. ``start_syncer(wake)`` starts a thread of its own that
fsyncs whatever was written since its last fsync (a group commit: one fsync for everything
that arrived meanwhile), then raises ``durable_index`` (the last entry on disk as it is in the
journal now) and calls ``wake`` (the node wakes its tick thread). pysyncobj's tick thread
therefore never waits for the disk: it keeps reading heartbeats and sending them however slow
an fsync is (fsyncs of 100+ ms on a busy disk held a follower's tick past its
election timeout, and it stood for election). Durability is unchanged, because the node acts
on ``durable_index``, not on what was written: the transport holds a follower's append-entries
acknowledgement until ``durable_index`` reaches the entry it acknowledges, and a leader counts
itself towards a commit only up to ``durable_index`` (``raftsched.raft.group_commit``). Without a
syncer (unit tests, tools) ``flush`` fsyncs inline, as before.

A truncation (``deleteEntriesFrom``, ``clear``) lowers ``durable_index`` below the cut and
starts a new generation: an fsync that was running across it proves nothing about entries
written after the cut, so its result is dropped and the next fsync counts. Compaction
(``deleteEntriesTo``) rewrites the file durably on the tick thread (rare; pysyncobj calls it
once per compaction) and leaves everything durable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class GroupCommit:
    """The fsync half of :class:`~raftsched.raft.journal.DurableJournal` (a mixin: it uses
    the journal's ``_fd``, ``_entries``, ``durable``, ``path``, ``_sync_fd`` and
    ``_store_meta``)."""

    _fd: int
    _entries: list[tuple[bytes, int, int]]
    _dirty: bool
    durable: bool
    path: str
    _synced_hook: bool  # the power-loss test's record (journal module docstring)

    def _init_group_commit(self) -> None:
        # The background syncer (start_syncer) and the tick thread share what follows.
        self._sync_lock = threading.Lock()  # _fd, _dirty, _durable_index, _generation
        self._sync_wanted = threading.Condition(self._sync_lock)
        self._meta_lock = threading.Lock()  # one meta file write at a time, in order
        self._durable_index = 0
        self._generation = 0  # raised by every truncation
        self._syncer: threading.Thread | None = None
        self._syncer_stop = False
        self._meta_wanted = False  # onOneSecondTimer asked the syncer to save the meta
        self._wake: Callable[[], None] | None = None

    def _sync_fd(self, fd: int | None = None, length: int | None = None) -> None:
        raise NotImplementedError

    def _store_meta(self) -> None:
        raise NotImplementedError

    def _note_synced(self, length: int) -> None:
        if self._synced_hook and self.durable:
            self._noted_length = length
            # Replaced whole: a kill -9 mid-write must not leave an empty record.
            staged = f"{self.path}.synced.{threading.get_ident()}"
            with open(staged, "w") as f:
                f.write(f"{length}\n")
            os.replace(staged, self.path + ".synced")

    def _note_cut(self, length: int) -> None:
        """The power-loss record after a truncation: what is on disk never extends past the
        file's end (the next fsync, off the tick thread, may come after a kill -9)."""
        if self._synced_hook and self.durable and getattr(self, "_noted_length", 0) > length:
            self._note_synced(length)

    @property
    def dirty(self) -> bool:
        """Whether entries were written (or removed) since the last fsync."""
        return self._dirty

    @property
    def durable_index(self) -> int:
        """The last entry on disk as it is in the journal now (every entry if not durable)."""
        if not self.durable:
            return self._last_index()
        return self._durable_index

    @property
    def last_index(self) -> int:
        """The index of the journal's last entry (0 when empty)."""
        return self._last_index()

    @property
    def syncing_in_background(self) -> bool:
        return self._syncer is not None

    def flush(self) -> bool:
        """Make everything written so far durable (one fsync) on this thread; True if it
        synced."""
        with self._sync_lock:
            if not self._dirty:
                return False
            self._dirty = False
            if not self.durable:
                self._durable_index = self._last_index()
                return False
            fd, target, generation, length = self._sync_target()
        try:
            self._sync_fd(fd, length)
        finally:
            os.close(fd)
        self._synced(target, generation, length)
        return True

    def start_syncer(self, wake: Callable[[], None] | None = None) -> None:
        """fsync in a thread of its own from now on; ``wake()`` runs (on that thread) each
        time ``durable_index`` rose. Idempotent; nothing to do when not durable."""
        self._wake = wake
        if not self.durable or self._syncer is not None:
            return
        self._syncer_stop = False
        self._syncer = threading.Thread(
            target=self._syncer_loop, name=f"journal-fsync {self.path}", daemon=True
        )
        self._syncer.start()

    def stop_syncer(self, timeout: float = 5.0) -> None:
        thread = self._syncer
        if thread is None:
            return
        with self._sync_lock:
            self._syncer_stop = True
            self._sync_wanted.notify()
        if thread is not threading.current_thread():
            thread.join(timeout)
        self._syncer = None

    def _syncer_loop(self) -> None:
        while True:
            with self._sync_lock:
                while not (self._dirty or self._meta_wanted or self._syncer_stop):
                    self._sync_wanted.wait()
                if self._syncer_stop:
                    return
                job = None
                if self._dirty and self._fd >= 0:
                    self._dirty = False
                    job = self._sync_target()
                save_meta, self._meta_wanted = self._meta_wanted, False
            try:
                if job is not None:
                    fd, target, generation, length = job
                    try:
                        self._sync_fd(fd, length)
                    finally:
                        os.close(fd)
                    if self._synced(target, generation, length) and self._wake is not None:
                        with contextlib.suppress(OSError):  # a full pipe: the tick is awake
                            self._wake()
                if save_meta:
                    self._store_meta()
            except Exception:
                # a failing disk: say so and try again (acknowledgements stay held meanwhile)
                log.exception("%s: background fsync failed", self.path)
                with self._sync_lock:
                    self._dirty = True
                time.sleep(0.5)

    def _sync_target(self) -> tuple[int, int, int, int]:
        """(own fd to fsync, last index it covers, generation, file length); under the lock."""
        return (
            os.dup(self._fd),
            self._last_index(),
            self._generation,
            os.fstat(self._fd).st_size,  # not lseek: the tick thread's writes use the offset
        )

    def _synced(self, target: int, generation: int, length: int) -> bool:
        """Record an fsync that covered entries up to ``target`` (``length`` bytes); True if
        that is news."""
        with self._sync_lock:
            if generation != self._generation:
                self._dirty = True  # truncated meanwhile: the next fsync decides
                return False
            # the power-loss test's record of what is on disk comes before anything acts on it
            self._note_synced(length)
            news = target > self._durable_index
            self._durable_index = max(self._durable_index, target)
        return news

    def _mark_dirty(self) -> None:
        with self._sync_lock:
            self._dirty = True
            if self._syncer is not None:
                self._sync_wanted.notify()

    def _truncated(self, keep_to: int) -> None:
        """Entries after ``keep_to`` went (under the lock)."""
        self._generation += 1
        self._durable_index = min(self._durable_index, keep_to)
        self._dirty = True
        if self._syncer is not None:
            self._sync_wanted.notify()

    def _last_index(self) -> int:
        return self._entries[-1][1] if self._entries else 0
