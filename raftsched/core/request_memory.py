"""Request-id memory: the results of the latest commands, by request id (idempotency).

Owns the FIFO map request id -> Result of the last ``DEDUP_CAPACITY`` commands that changed
the state (or were refused by a handler). Guarantees: at most ``DEDUP_CAPACITY`` entries, the
oldest forgotten first; re-remembering an id moves it to the newest place; every entry's
fingerprint (``digest.fp_request``) is in the shared digest sum exactly while it is held.
Raises nothing. An entry remembered here keeps the share computed then and leaves with it
(results are frozen: hashing one again when it is forgotten doubled the memory's digest
cost); a restored entry's share is computed when it leaves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from raftsched.core import digest as dg
from raftsched.core.digest_sum import DigestSum
from raftsched.core.results import Result

DEDUP_CAPACITY = 10_000  # request ids remembered (FIFO); part of the snapshot


class RequestMemory:
    __slots__ = ("_results", "_shares", "_sum")

    def __init__(self, digest_sum: DigestSum) -> None:
        self._results: OrderedDict[str, Result] = OrderedDict()
        self._shares: dict[str, int] = {}  # request id -> its share, when computed here
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
            self._forget(request_id, old)
        self._results[request_id] = result
        share = self._shares[request_id] = self._sum.share(dg.fp_request, request_id, result)
        self._sum.value = (self._sum.value + share) % dg.MOD
        while len(self._results) > DEDUP_CAPACITY:
            self._forget(*self._results.popitem(last=False))

    def _forget(self, request_id: str, result: Result) -> None:
        share = self._shares.pop(request_id, None)
        if share is None:  # restored, or remembered before the scheme changed
            share = self._sum.share(dg.fp_request, request_id, result)
        self._sum.value = (self._sum.value - share) % dg.MOD

    def forget_shares(self) -> None:
        """The digest scheme changed: shares are computed again as entries leave."""
        self._shares.clear()

    def load(self, items: Iterable[tuple[str, Result]]) -> None:
        """Restore (a snapshot's items, oldest first); the caller recomputes the digest."""
        self._results = OrderedDict(items)
        self._shares.clear()
