"""A short-lived cache of the cluster's read answers in each webserver process.

Why: a DAG list page is the same gRPC ListDags for everyone who looks at it; answering it
costs the webserver a gRPC round trip (~0.4 ms of CPU) and the node ~0.8 ms. The node itself
answers from a read view that may be up to ``ReadViews.max_age`` old (README "Benchmarks");
this cache keeps an answer for ``ttl`` seconds more (``RAFTSCHED_WEB_READ_CACHE_SECONDS``,
default :data:`DEFAULT_TTL`; 0 turns it off), under the same consistency rules:

- an answer is reused only for the same method, the same request (its serialized bytes) and
  the same caller identity (the REST caller's token; the pages all call as the webserver);
- only while its data's applied index (``freshness.applied_index``) is at least what the
  caller has seen (the session's or the ``X-Raftsched-Min-Index`` index): read-your-writes
  and monotonic reads hold exactly as when the node answers; a linearizable read is never
  served from here;
- a write through this process (any call but List*/Get*/Verify*) empties the cache, so a
  client that writes and reads through one webserver sees its write even without sending
  the index it was given;
- answers are proto messages kept as they came; readers must not modify them.

The REST API keeps whole JSON bodies of its GET answers here too (``web/api/blueprint.py``), under
the same rules, keyed by token and path with query: a hit skips the gRPC call, the proto to
dict conversion and the marshmallow dump.

Thread-safe. Bounded: at most :data:`MAX_ENTRIES` answers (the oldest go first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

DEFAULT_TTL = 0.2  # seconds (settings.DEFAULTS READ_CACHE_SECONDS)
MAX_ENTRIES = 256
# Reads whose answers may be reused (each has ``freshness``); never users, status or logs.
_READ_PREFIXES = ("List", "Get", "Verify")
CACHEABLE = frozenset({"ListDags", "GetDag", "ListRuns", "ListTaskInstances", "ListImportErrors"})


class ReadCache:
    def __init__(self, ttl: float = DEFAULT_TTL, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = float(ttl)
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, int, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def key(self, method: str, request: Any, identity: str) -> tuple[Any, ...] | None:
        """The entry's key, or None when this call must not be cached."""
        if self.ttl <= 0 or method not in CACHEABLE:
            return None
        return (method, type(request).__name__, request.SerializeToString(deterministic=True),
                identity)  # fmt: skip

    def get(self, key: tuple[Any, ...] | None, min_index: int) -> tuple[int, Any] | None:
        """(data index, answer) when a fresh enough answer is held."""
        if key is None:
            return None
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now and entry[1] >= min_index:
                self.hits += 1
                return entry[1], entry[2]
            self.misses += 1
        return None

    def put(self, key: tuple[Any, ...] | None, response: Any) -> None:
        if key is None:
            return
        self.put_value(key, data_index(response), response)

    def put_value(self, key: tuple[Any, ...], index: int, value: Any) -> None:
        """Keep ``value`` whose data is at applied ``index`` (0: unknown, not kept)."""
        if self.ttl <= 0 or index <= 0:
            return  # no data index to check a caller's against: not reusable
        with self._lock:
            self._entries[key] = (time.monotonic() + self.ttl, index, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def after_call(self, method: str) -> None:
        """Forget everything after a write (see the module docstring)."""
        if not method.startswith(_READ_PREFIXES):
            self.clear()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def data_index(response: Any) -> int:
    """The applied index an answer's data was read at (``freshness``), 0 when it has none."""
    return int(getattr(getattr(response, "freshness", None), "applied_index", 0) or 0)
