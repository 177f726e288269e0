"""One way for the server's interceptors to wrap a handler's behaviour.

Authentication (caller scope), decoding errors and consistency each replace the behaviour of
a unary-request handler; they differ only in what they wrap it with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Behaviour = Callable[[Any, grpc.ServicerContext], Any]


def with_behaviour(
    handler: grpc.RpcMethodHandler,
    unary: Callable[[Behaviour], Behaviour],
    stream: Callable[[Behaviour], Behaviour],
    *,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` (a unary request) with its behaviour wrapped by ``unary`` or ``stream``,
    by its response kind; its serializers kept unless ``request_deserializer`` is given."""
    deserializer = request_deserializer or handler.request_deserializer
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            stream(handler.unary_stream),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        unary(handler.unary_unary),
        request_deserializer=deserializer,
        response_serializer=handler.response_serializer,
    )
