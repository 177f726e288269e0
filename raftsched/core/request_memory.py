"""Request-id memory: the results of the latest commands, by request id (idempotency).

Owns the FIFO map request id -> Result of the last ``DEDUP_CAPACITY`` commands that changed
the state (or were refused by a handler). Guarantees: at most ``DEDUP_CAPACITY`` entries, the
oldest forgotten first; re-remembering an id moves it to the newest place; every entry's
fingerprint (``digest.fp_request``) is in the shared digest sum exactly while it is held.
Raises nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from raftsched.core import digest as dg
from raftsched.core.results import Result

DEDUP_CAPACITY = 10_000  # request ids remembered (FIFO); part of the snapshot


class RequestMemory:
    __slots__ = ("_results", "_sum")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._results: OrderedDict[str, Result] = OrderedDict()
        self._sum = digest_sum

    def __len__(self) -> int:
        return len(self._results)

    def get(self, request_id: str) -> Result | None:
        return self._results.get(request_id)

    def items(self) -> Iterator[tuple[str, Result]]:
        """Oldest first (the snapshot's order)."""
        return iter(self._results.items())

    def remember(self, request_id: str, result: Result) -> None:
        old = self._results.pop(request_id, None)
        if old is not None:
            self._sum.remove(dg.fp_request(request_id, old))
        self._results[request_id] = result
        self._sum.add(dg.fp_request(request_id, result))
        while len(self._results) > DEDUP_CAPACITY:
            old_id, old = self._results.popitem(last=False)
            self._sum.remove(dg.fp_request(old_id, old))

    def load(self, items: Iterable[tuple[str, Result]]) -> None:
        """Restore (a snapshot's items, oldest first); the caller recomputes the digest."""
        self._results = OrderedDict(items)
