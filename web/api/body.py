"""A REST request's JSON body, with its numbers bounded while it is parsed.

``json.loads`` turns a 5,000-digit literal into a ValueError past Python's int-from-text
limit (a 500, before any field is checked), and ``1e999`` or ``Infinity`` into a float the
cluster can neither store nor compare. Each number is checked by its literal, before Python
builds it: an integer has at most :data:`MAX_INT_DIGITS` digits (64 bits; the cluster refuses
anything larger anyway, see ``limits.MAX_JSON_INT``), a number is finite, and the
non-JSON constants ``NaN``/``Infinity`` are refused. A broken number is an
:class:`~raftsched.web.api.errors.ApiProblem` (400 INVALID_ARGUMENT naming the literal).
Nesting needs no scan here: the decoder's RecursionError already answers 400
(``errors.register``), and the body is at most ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from raftsched.web.api.errors import ApiProblem

from raftsched.core import limits

MAX_INT_DIGITS = len(str(limits.MAX_JSON_INT))  # 19
SHOWN = 40  # characters of a refused literal quoted back


def _shown(literal: str) -> str:
    return literal if len(literal) <= SHOWN else f"{literal[:SHOWN]}..."


def _int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ApiProblem(
            "INVALID_ARGUMENT",
            f"the body has an integer of {digits} digits ({_shown(literal)}): integers are"
            f" limited to {MAX_INT_DIGITS} digits (64 bits); send a larger number as a string",
            field="body",
        )
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ApiProblem(
            "INVALID_ARGUMENT",
            f"the body has the number {_shown(literal)}, which is out of range: numbers must"
            " be finite (at most about 1.8e308)",
            field="body",
        )
    return value


def _constant(name: str) -> Any:
    raise ApiProblem(
        "INVALID_ARGUMENT",
        f"the body has {name}, which is not JSON: numbers must be finite",
        field="body",
    )


def loads(data: bytes | str) -> Any:
    """The body's JSON value (ValueError, e.g. JSONDecodeError, when it is not JSON;
    ApiProblem for a number past the bounds)."""
    return json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant)
