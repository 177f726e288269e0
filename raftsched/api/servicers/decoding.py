"""A request gRPC cannot decode is INVALID_ARGUMENT, not INTERNAL.

grpcio decodes a request before any servicer runs; bytes that are not a valid message (most
often a string field holding invalid UTF-8, which proto3 forbids) make it answer
``INTERNAL: Exception deserializing request!``. No input a client can send may answer
INTERNAL, so :class:`DecodeErrorInterceptor` wraps each method's request deserializer: a
request that does not decode reaches the method as :data:`UNDECODABLE`, and the method answers
INVALID_ARGUMENT naming the message type and what was wrong, without running.

Add it to the server's interceptors (any position: it only wraps the handler's deserializer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from raftsched.api.wrap import with_behaviour

MAX_DETAIL = 200


class _Undecodable:
    """The request of a call whose bytes did not decode (see the module docstring)."""

    __slots__ = ("error", "type_name")

    def __init__(self, type_name: str, error: str) -> None:
        self.type_name = type_name
        self.error = error

    def message(self) -> str:
        hint = " (string fields must be valid UTF-8)" if "UTF-8" in self.error else ""
        return f"the request is not a valid {self.type_name}: {self.error[:MAX_DETAIL]}{hint}"


UNDECODABLE = _Undecodable  # the type of what a method receives for an undecodable request


def _type_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)  # Message.FromString is a classmethod
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "") or "message")


def _safe(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    name = _type_name(deserializer)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as err:  # DecodeError, UnicodeDecodeError, ...
            return _Undecodable(name, str(err) or type(err).__name__)

    return deserialize


def _guard_unary(behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message())
        return behavior(request, context)

    return call


def _guard_stream(behavior: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if isinstance(request, _Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message())
        yield from behavior(request, context)

    return call


def safe_handler(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler | None:
    """``handler`` with a request deserializer that never raises (unary requests only)."""
    if handler is None or handler.request_streaming or handler.request_deserializer is None:
        return handler
    deserializer = _safe(handler.request_deserializer)
    return with_behaviour(handler, _guard_unary, _guard_stream, request_deserializer=deserializer)


class DecodeErrorInterceptor(grpc.ServerInterceptor):
    """Undecodable requests answer INVALID_ARGUMENT instead of INTERNAL."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        return safe_handler(continuation(handler_call_details))
