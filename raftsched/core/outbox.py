"""The outbox: the entries apply writes for the materializer, until it acknowledges them.

Owns the entries (``OutboxEntry``, in seq order), the last seq written, the last seq
acknowledged and the count of log characters held (for the hard cap of ``core.limits``).
Guarantees: seqs are consecutive from ``acked_seq + 1`` to ``last_seq``; every held entry's
fingerprint (``digest.fp_outbox``) is in the shared digest sum exactly while it is held, and
in :attr:`Outbox.digest_share` (the entries' part of that sum, which snapshots carry: see
:meth:`load`). An entry written here keeps the contribution computed when it was written,
and :meth:`ack` subtracts that one: entries are never changed while held (they are frozen,
and their data is read, never written, by the materializer and snapshots), so
fingerprinting them again on the way out was a second canonical text per entry for the same
number, on the apply path of every node. Entries restored from a snapshot have none kept
and are fingerprinted
when they leave (:meth:`load` says why).
The materializer reads entries with :meth:`after` and acknowledges them with
``AckMaterialized`` (:meth:`ack`). Raises nothing: :meth:`ack` answers a refusal reason.
Which entries a command writes is ``core.changes``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice

from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core.limits import OUTBOX_HARD_CAP_ENTRIES, OUTBOX_HARD_CAP_LOG_CHARS
from raftsched.core.model import OutboxEntry, OutboxKind


def log_chars(entry: OutboxEntry) -> int:
    """Characters of log text an entry holds (what the outbox's hard cap counts)."""
    return len(entry.data["text"]) if entry.kind is OutboxKind.TASK_LOG else 0


class Outbox:
    __slots__ = (
        "_entries",
        "_log_chars",
        "_shares",
        "_sum",
        "acked_seq",
        "digest_share",
        "last_seq",
    )

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._entries: deque[OutboxEntry] = deque()
        # beside each entry: its digest contribution, or None (restored: computed at ack)
        self._shares: deque[int | None] = deque()
        self._log_chars = 0  # derived, for the hard cap
        self._sum = digest_sum
        self.digest_share = 0  # the held entries' fingerprints summed (as in digest.DigestSum)
        self.acked_seq = 0
        self.last_seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[OutboxEntry]:
        return iter(self._entries)

    @property
    def log_chars(self) -> int:
        return self._log_chars

    def emit(self, kind: OutboxKind, data: dict) -> int:
        """Append an entry; its seq."""
        self.last_seq += 1
        entry = OutboxEntry(self.last_seq, kind, data)
        self._entries.append(entry)
        self._log_chars += log_chars(entry)
        share = dg.contribution(dg.fp_outbox(entry))
        self._shares.append(share)
        self._add_share(share)
        return entry.seq

    def is_full(self) -> bool:
        """At the hard cap (``core.limits``): new leases and log appends are refused."""
        return (
            len(self._entries) >= OUTBOX_HARD_CAP_ENTRIES
            or self._log_chars >= OUTBOX_HARD_CAP_LOG_CHARS
        )

    def after(self, seq: int, limit: int) -> list[OutboxEntry]:
        """Up to ``limit`` entries after ``seq`` (at or past ``acked_seq``), in order."""
        start = max(0, seq - self.acked_seq)
        return list(islice(self._entries, start, start + max(0, limit)))

    def ack(self, seq: int) -> str:
        """Drop the entries up to ``seq`` (materialized); the refusal reason, or "" if done."""
        if seq > self.last_seq:
            return r.ACK_BEYOND_LAST
        if seq <= self.acked_seq:
            return r.STALE_ACK
        entries, shares = self._entries, self._shares
        dropped = 0
        chars = 0
        while entries and entries[0].seq <= seq:
            entry = entries.popleft()
            share = shares.popleft()
            if entry.kind is OutboxKind.TASK_LOG:
                chars += log_chars(entry)
            dropped += dg.contribution(dg.fp_outbox(entry)) if share is None else share
        self._log_chars -= chars
        self._add_share(-dropped)
        self.acked_seq = seq
        return ""

    def _add_share(self, contribution: int) -> None:
        self.digest_share = (self.digest_share + contribution) % dg.MOD
        self._sum.value = (self._sum.value + contribution) % dg.MOD

    def load(
        self,
        acked_seq: int,
        last_seq: int,
        entries: Iterable[OutboxEntry],
        digest_share: int | None = None,
    ) -> None:
        """Restore (a snapshot's); the caller adds :attr:`digest_share` to the digest.

        ``digest_share`` is the share the snapshotted outbox had (None: a snapshot without
        it; then it is computed here). Entries come back verbatim from the snapshot (plain
        JSON data, never rebuilt), so their share is carried rather than recomputed: that is
        most of a restore's digest work at 100,000 DAGs (every DAG row holds its spec). It
        is still checked, entry by entry: every entry leaves by :meth:`ack`, which subtracts
        the share recomputed from the entry held, so an entry restored differently from the
        one snapshotted shows as a digest that differs from the other replicas'."""
        self.acked_seq, self.last_seq = acked_seq, last_seq
        self._entries = deque(entries)
        self._shares = deque([None]) * len(self._entries)
        self._log_chars = sum(log_chars(e) for e in self._entries)
        if digest_share is None:
            digest_share = sum(dg.contribution(dg.fp_outbox(e)) for e in self._entries)
        self.digest_share = digest_share % dg.MOD
