"""Masking: secret values replaced by ``***`` in what an attempt hands back.

The worker knows every value it injected into an attempt (``worker.task_secrets``); before
anything the attempt produced leaves the worker, each of those values becomes :data:`MASK`:

- its output, which arrives in pieces (:class:`StreamMasker`);
- its outcome message (:func:`mask_text`);
- its return value (XCom), JSON text (:func:`mask_json`): masked inside each string (keys
  included) so the JSON stays valid, whatever escapes the task wrote.

Values shorter than :data:`MIN_MASKED_CHARS` are not masked (masking "1" would blank every
digit of a log).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from typing import Any

from raftsched.core import limits

MASK = "***"
MIN_MASKED_CHARS = 4


def maskable(values: Iterable[str]) -> list[str]:
    """The values worth masking, longest first (so a value containing another goes whole)."""
    return sorted({v for v in values if len(v) >= MIN_MASKED_CHARS}, key=len, reverse=True)


def _pattern(values: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(re.escape(v) for v in values)) if values else None


def mask_text(text: str, values: Iterable[str]) -> str:
    pattern = _pattern(maskable(values))
    return pattern.sub(MASK, text) if pattern is not None else text


def mask_json(text: str, values: Iterable[str]) -> str:
    """JSON text with each value masked inside every string, object keys included, and a
    number whose JSON text holds one replaced by the string ``"***"``. The same text when
    nothing is masked; else compact JSON again. ``text`` is JSON already bounded in size and
    depth (``core.xcom.check_result_json``); ValueError when it is not JSON."""
    pattern = _pattern(maskable(values))
    if pattern is None or not text:
        return text
    # parsed, not searched: the task may have written a value with JSON escapes ("\u0068...")
    value = limits.loads_json(text)
    masked = _masked(value, pattern)
    if masked == value:
        return text
    return json.dumps(masked, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _masked(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value)
    if isinstance(value, dict):
        # two keys that mask alike keep the later one's value (JSON objects cannot repeat keys)
        return {pattern.sub(MASK, k): _masked(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, pattern) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    return MASK if pattern.search(json.dumps(value)) else value  # a number: a PIN, an id


class StreamMasker:
    """Masks values in a stream of text that arrives in pieces, so a value split between two
    reads is masked all the same: it holds back the last ``longest - 1`` characters (none
    after a newline, when no value spans lines) until more text or :meth:`flush` comes."""

    def __init__(self, values: Iterable[str]) -> None:
        self._lock = threading.Lock()  # add() comes from another thread than feed()
        self.pending = ""
        self._set(maskable(values))

    def _set(self, values: list[str]) -> None:
        self.values = values
        self.keep = max((len(v) for v in self.values), default=1) - 1
        self.lines = not any("\n" in v for v in self.values)
        self.pattern = _pattern(self.values)

    def add(self, values: Iterable[str]) -> None:
        """Mask ``values`` too, from the next :meth:`feed` on (a value read on demand: the
        task receives it only after this returned)."""
        with self._lock:
            self._set(maskable([*self.values, *values]))

    def feed(self, text: str) -> str:
        with self._lock:
            return self._feed(text)

    def _feed(self, text: str) -> str:
        if self.pattern is None:
            return text
        buf = self.pending + text
        cut = len(buf) if self.lines and buf.endswith("\n") else max(0, len(buf) - self.keep)
        out: list[str] = []
        pos = 0
        for match in self.pattern.finditer(buf):
            if match.start() >= cut:
                break
            out += [buf[pos : match.start()], MASK]
            pos = match.end()
        if pos < cut:
            out.append(buf[pos:cut])
            pos = cut
        self.pending = buf[pos:]
        return "".join(out)

    def flush(self) -> str:
        with self._lock:
            rest, self.pending = self.pending, ""
            return self.pattern.sub(MASK, rest) if self.pattern is not None else rest
