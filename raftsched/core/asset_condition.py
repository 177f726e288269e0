"""Asset URIs and asset conditions: their bounds, and the condition's truth (§21).

An asset is named by a URI (``s3://bucket/key``, ``file:///data/x.csv``, any scheme, or a
bare name as Airflow allows). A DAG scheduled on assets holds its condition in
``DagSpec.asset_condition`` as canonical JSON text: a URI string, ``{"all": [...]}`` (every
one: ``schedule=[a, b]`` and ``a & b``) or ``{"any": [...]}`` (``a | b``), nested.

Pure and total on validated input: the checks bound the depth (``MAX_CONDITION_DEPTH``), so
the walks below never go deeper than that, whatever a DAG file wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from raftsched.core import limits as lim
from raftsched.errors import LimitExceeded

MAX_URI_CHARS = 1_000
MAX_EXTRA_BYTES = 4_096  # an event's extra, as compact JSON
MAX_CONDITION_DEPTH = 8
MAX_ASSETS_PER_DAG = 100  # distinct URIs in one DAG's condition, outlets and inlets
MAX_CONDITION_CHARS = MAX_ASSETS_PER_DAG * (MAX_URI_CHARS + 16)

ALL = "all"
ANY = "any"


def check_uri(field: str, uri: object) -> str:
    """A URI: 1..1,000 printable ASCII characters without spaces."""
    if not isinstance(uri, str) or not uri:
        raise LimitExceeded(field, "must be a non-empty string (an asset URI)")
    if len(uri) > MAX_URI_CHARS:
        raise LimitExceeded(field, f"is longer than {MAX_URI_CHARS:,} characters")
    if not all(" " < ch < "\x7f" for ch in uri):
        raise LimitExceeded(field, "may hold printable ASCII characters only (no spaces)")
    return uri


def check_uris(field: str, uris: object) -> tuple[str, ...]:
    if not isinstance(uris, tuple):
        raise LimitExceeded(field, "must be a tuple of asset URIs")
    if len(uris) > MAX_ASSETS_PER_DAG:
        raise LimitExceeded(field, f"names more than {MAX_ASSETS_PER_DAG} assets")
    return tuple(check_uri(f"{field}[{i}]", uri) for i, uri in enumerate(uris))


def check_condition(field: str, text: object) -> Any:
    """``text`` ("" for none) parsed and checked: a URI, or {"all"|"any": [...]} nested at
    most MAX_CONDITION_DEPTH deep naming at most MAX_ASSETS_PER_DAG URIs."""
    if not isinstance(text, str):
        raise LimitExceeded(field, "must be JSON text")
    if not text:
        return None
    if len(text) > MAX_CONDITION_CHARS:
        raise LimitExceeded(field, f"is longer than {MAX_CONDITION_CHARS:,} characters")
    depth = 0
    for ch in text:  # before parsing: json's own recursion is never reached
        depth += ch in "[{"
        depth -= ch in "]}"
        if depth > 2 * MAX_CONDITION_DEPTH:
            raise LimitExceeded(field, f"is nested deeper than {MAX_CONDITION_DEPTH} levels")
    try:
        value = json.loads(text)
    except ValueError as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    stack = [(value, 0)]
    uris = set()
    while stack:
        node, level = stack.pop()
        if isinstance(node, str):
            uris.add(check_uri(f"{field} URI", node))
            continue
        if level >= MAX_CONDITION_DEPTH:
            raise LimitExceeded(field, f"is nested deeper than {MAX_CONDITION_DEPTH} levels")
        if not (isinstance(node, dict) and len(node) == 1):
            raise LimitExceeded(field, 'must be a URI or {"all"|"any": [...]}')
        ((op, items),) = node.items()
        if op not in (ALL, ANY) or not isinstance(items, list) or not items:
            raise LimitExceeded(field, 'must be a URI or {"all"|"any": [non-empty list]}')
        stack.extend((item, level + 1) for item in items)
    if len(uris) > MAX_ASSETS_PER_DAG:
        raise LimitExceeded(field, f"names more than {MAX_ASSETS_PER_DAG} assets")
    return value


def parse(text: str) -> Any:
    """A checked condition's value (None for "")."""
    return json.loads(text) if text else None


def uris_of(condition: Any) -> frozenset[str]:
    """Every URI a (checked) condition names."""
    out: set[str] = set()
    stack = [condition]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.add(node)
        elif isinstance(node, dict):
            for items in node.values():
                stack.extend(items)
    return frozenset(out)


def satisfied(condition: Any, present: Iterable[str] | frozenset[str]) -> bool:
    """Whether ``condition`` holds when the assets ``present`` have a queued event (Airflow's
    AssetAll/AssetAny). Recursion bounded by the checked depth."""
    have = present if isinstance(present, frozenset) else frozenset(present)
    return _holds(condition, have)


def _holds(node: Any, have: frozenset[str]) -> bool:
    if isinstance(node, str):
        return node in have
    ((op, items),) = node.items()
    if op == ALL:
        return all(_holds(item, have) for item in items)
    return any(_holds(item, have) for item in items)


def canonical_json(condition: Any) -> str:
    """The text a DagSpec holds (no spaces; keys as given, there is one per level)."""
    return json.dumps(condition, separators=(",", ":"), ensure_ascii=True)


def check_extra(field: str, text: object) -> dict[str, Any]:
    """An event's extra: a JSON object text of at most MAX_EXTRA_BYTES, 8 levels deep."""
    lim.check_text(field, text, MAX_EXTRA_BYTES)
    assert isinstance(text, str)
    if len(text.encode("utf-8")) > MAX_EXTRA_BYTES:
        raise LimitExceeded(field, f"is larger than {MAX_EXTRA_BYTES:,} bytes")
    depth = 0
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if depth > MAX_CONDITION_DEPTH:
            raise LimitExceeded(field, f"is nested deeper than {MAX_CONDITION_DEPTH} levels")
    try:
        value = lim.loads_json(text)
    except ValueError as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    lim.check_json_object(field, {"v": value}, MAX_EXTRA_BYTES + 8, MAX_CONDITION_DEPTH + 1)
    if not isinstance(value, dict):
        raise LimitExceeded(field, "must be a JSON object")
    return value


MAX_OUTLET_EXTRAS_BYTES = 65_536  # all of one attempt's outlet extras together


def check_outlet_extras(field: str, value: object) -> tuple[tuple[str, str], ...]:
    """An attempt's outlet extras (``CompleteAttempt.outlet_extras``): a tuple of at most
    MAX_ASSETS_PER_DAG (URI, extra) pairs, URIs sorted and distinct, each extra as
    :func:`check_extra`, at most MAX_OUTLET_EXTRAS_BYTES in all."""
    if not isinstance(value, tuple):
        raise LimitExceeded(field, "must be a tuple of (URI, extra) pairs")
    if len(value) > MAX_ASSETS_PER_DAG:
        raise LimitExceeded(field, f"names more than {MAX_ASSETS_PER_DAG} assets")
    total = 0
    previous = ""
    for i, pair in enumerate(value):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise LimitExceeded(f"{field}[{i}]", "must be a (URI, extra) pair")
        uri = check_uri(f"{field}[{i}].uri", pair[0])
        if uri <= previous:
            raise LimitExceeded(f"{field}[{i}].uri", "must be sorted, each URI once")
        previous = uri
        check_extra(f"{field}[{i}].extra", pair[1])
        total += len(uri) + len(pair[1].encode("utf-8"))
        if total > MAX_OUTLET_EXTRAS_BYTES:
            raise LimitExceeded(field, f"is larger than {MAX_OUTLET_EXTRAS_BYTES:,} bytes in all")
    return value
