"""The gateway's errors: what a page or a REST answer makes of a failed call to the cluster.

:class:`Unavailable` (no node could answer), :class:`NotFound` and :class:`Refused` (any other
refusal, its message meant for the person who asked), all :class:`GatewayError`;
:func:`_translate` maps an :class:`~raftsched.errors.ApiError` to one and counts it in
``raftsched_web_upstream_errors_total``. Re-exported by :mod:`raftsched.web.gateway`.
"""

from __future__ import annotations

import grpc
from raftsched.web import metrics

from raftsched.errors import ApiError, RaftschedError

_UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class GatewayError(RaftschedError):
    """Base of the gateway's errors; ``message`` is fit to show to a person, ``code`` is the
    gRPC status the cluster answered (``status`` too: ``errors.http_status`` maps it)."""

    status = "UNKNOWN"

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        if code:
            self.status = code


class Unavailable(GatewayError):
    """No raftsched node could serve the call."""

    status = "UNAVAILABLE"


class NotFound(GatewayError):
    """The cluster answered NOT_FOUND."""

    status = "NOT_FOUND"


class Refused(GatewayError):
    """The cluster refused the call (INVALID_ARGUMENT, ALREADY_EXISTS, ...)."""

    status = "FAILED_PRECONDITION"


def _translate(err: ApiError, method: str) -> GatewayError:
    metrics.upstream_error(method, err.code.name)
    if err.code in _UNAVAILABLE:
        return Unavailable(err.message, err.code.name)
    if err.code is grpc.StatusCode.NOT_FOUND:
        return NotFound(err.message, err.code.name)
    return Refused(err.message, err.code.name)
