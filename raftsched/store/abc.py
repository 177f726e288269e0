"""The store's boundary as the cluster sees it: where committed outbox entries go.

Two implementations keep the same contract (tests/integration/test_store_materializer.py
runs one suite against all of them): ``store.materializer.Materializer`` (the metadata DB,
SQLite or PostgreSQL) and ``store.memory.MemoryMaterializer`` (a dict, for fast tests of the
leader loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from raftsched.core.model import OutboxEntry


class OutboxSink(Protocol):
    """Durable home of outbox entries, guarded by a watermark (the last seq written).

    Thread-safe. Exactly once: entries at or below the watermark are skipped, so writing a
    batch again (a new leader, a retry after an unknown outcome) writes nothing twice.
    """

    def watermark(self) -> int:
        """The seq of the last entry written; 0 when none has been.

        Raises StoreUnavailable when the store cannot be reached.
        """
        ...

    def write(self, entries: Sequence[OutboxEntry]) -> int:
        """Write the entries after the watermark, atomically with the new watermark.

        Entries may come in any order and may start at or below the watermark; the ones
        after it must be ``watermark + 1, + 2, ...`` without a gap, else ``OutboxGap`` is
        raised and nothing is written. Within one call a later upsert of the same key wins.
        An entry the store refuses (the row is bad: a constraint, NUL in PostgreSQL text) is
        quarantined, not written, and the watermark moves past it like past any other: one
        bad entry never stops the rest. Returns the watermark after the write (unchanged
        when there was nothing new).
        Raises StoreUnavailable when the store cannot be reached: nothing was written, or the
        whole batch was (the watermark tells which), so retrying is always safe.
        """
        ...

    def quarantined_count(self) -> int:
        """How many refused entries are in quarantine (``raftsched db quarantine list``).

        Raises StoreUnavailable when the store cannot be reached.
        """
        ...
