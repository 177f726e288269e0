"""What a client has seen, on the wire: read-your-writes, monotonic and linearizable reads.

The contract between :mod:`raftsched.api.client` and every node (README "Consistency"):

- Request metadata ``x-raftsched-min-index: N``: the caller has seen (read or caused) the
  cluster's state up to Raft log index N. A node that has applied less waits up to
  :data:`CATCH_UP_WAIT` s (or the call's remaining deadline, if smaller) for its replica to
  catch up, else answers UNAVAILABLE naming both indexes, and the failover client tries the
  next node. The last part of that wait is a read-index round trip (below): a node cut off
  from the majority cannot complete it and refuses; a node that completes it and is still
  below N knows this cluster never committed N (it was re-created since the caller saw N),
  serves the call and says so with the trailer ``x-raftsched-index-reset``.
- Request metadata ``x-raftsched-consistency: linearizable``: before the handler runs, the
  node commits a no-op through the leader (a read-index round trip) and, once its replica
  applied it, reads: the answer reflects every write that completed before the call began.
- Trailing metadata ``x-raftsched-applied-index: N`` on every successful answer: the
  answering node had applied at least N when it finished (for a write: at least the
  write's own index). Read responses also carry ``freshness.applied_index`` (the index the
  read state was taken at); the client remembers the larger of the two.

:class:`ConsistencyInterceptor` implements the server side for every raftsched RPC (not for
the health and reflection services), around a :class:`Gate` (``ApiContext`` is one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from raftsched.api import status
from raftsched.api.auth import OPEN_PREFIXES
from raftsched.api.wrap import with_behaviour

log = logging.getLogger(__name__)

MIN_INDEX_HEADER = "x-raftsched-min-index"
CONSISTENCY_HEADER = "x-raftsched-consistency"
LINEARIZABLE = "linearizable"
APPLIED_TRAILER = "x-raftsched-applied-index"
RESET_TRAILER = "x-raftsched-index-reset"
CATCH_UP_WAIT = 2.0  # seconds a lagging node waits for its replica before UNAVAILABLE


class Gate(Protocol):
    def applied_through(self) -> int:
        """Every command up to this log index is in this node's state."""
        ...

    def await_applied(self, min_index: int, context: grpc.ServicerContext) -> bool:
        """Return once ``min_index`` is applied (False) or proven never committed here (True:
        a reset); raise a StatusError (UNAVAILABLE) when the bounded wait ends."""
        ...

    def read_index(self, context: grpc.ServicerContext) -> None:
        """Return once this node applied everything committed before the call."""
        ...


@dataclass(frozen=True)
class Wanted:
    """What the caller asked for in its metadata."""

    min_index: int = 0
    linearizable: bool = False


def parse(metadata: Iterable[Any]) -> Wanted:
    """The caller's consistency metadata; ValueError (with what to send) when malformed."""
    min_index, linearizable = 0, False
    for key, value in metadata:
        text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if key == MIN_INDEX_HEADER:
            if not text.strip().isdigit():
                raise ValueError(
                    f"metadata {MIN_INDEX_HEADER} = {text[:40]!r}: expected a log index >= 0"
                )
            min_index = int(text.strip())
        elif key == CONSISTENCY_HEADER:
            if text.strip().lower() not in (LINEARIZABLE, ""):
                raise ValueError(
                    f"metadata {CONSISTENCY_HEADER} = {text[:40]!r}: expected {LINEARIZABLE!r}"
                )
            linearizable = bool(text.strip())
    return Wanted(min_index, linearizable)


class ConsistencyInterceptor(grpc.ServerInterceptor):
    """Holds every raftsched call until this node has applied what the caller has seen (or
    refuses it), runs linearizable reads after a read-index round trip, and stamps each
    answer with the applied index. Thread-safe: no mutable state."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_PREFIXES) or handler.request_streaming:
            return handler
        metadata = tuple(handler_call_details.invocation_metadata or ())
        return with_behaviour(
            handler,
            lambda behaviour: self._unary(behaviour, metadata),
            lambda behaviour: self._streaming(behaviour, metadata),
        )

    def _unary(self, behavior: Callable[..., Any], metadata: tuple[Any, ...]) -> Callable:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            reset = self._before(metadata, context)
            response = behavior(request, context)
            self._stamp(context, reset)
            return response

        return run

    def _streaming(self, behavior: Callable[..., Any], metadata: tuple[Any, ...]) -> Callable:
        def run(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            reset = self._before(metadata, context)
            self._stamp(context, reset)  # trailers go out at the end; the start is the floor
            yield from behavior(request, context)

        return run

    def _before(self, metadata: tuple[Any, ...], context: grpc.ServicerContext) -> bool:
        try:
            wanted = parse(metadata)
            if wanted.linearizable:
                self._gate.read_index(context)
            return bool(wanted.min_index) and self._gate.await_applied(wanted.min_index, context)
        except Exception as err:
            status.abort(context, err)

    def _stamp(self, context: grpc.ServicerContext, reset: bool) -> None:
        trailer = [(APPLIED_TRAILER, str(self._gate.applied_through()))]
        if reset:
            trailer.append((RESET_TRAILER, "1"))
        context.set_trailing_metadata(tuple(trailer))
