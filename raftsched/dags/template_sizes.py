"""How big what a task template makes would be, computed before it is made, and the budget
of one render: the arithmetic behind :mod:`raftsched.dags.sandbox`.

:func:`size_of` measures a value as text (what ``str()`` would make) without building it and
stops past the bound; :func:`percent_size` and :class:`BoundedFormatter` read ``%`` and
``str.format`` specs (width, precision) before formatting; :func:`join_size`,
:func:`replace_size` and :func:`str_method_size` give the size of what ``join``, ``replace``,
``expandtabs`` and ``translate`` would make. SecurityError for anything past the bounds.
"""

from __future__ import annotations

import contextvars
import math
import re
import time
from collections.abc import Iterable
from typing import Any

from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter, SecurityError

MAX_RENDERED_CHARS = 1_000_000  # one rendered value (a command, an env value, a kwarg)
MAX_VALUE_CHARS = MAX_RENDERED_CHARS  # any value a template makes, measured as text
MAX_LOOP_ITERATIONS = 100_000  # all {% for %} loops of one render together
MAX_SIZING_STEPS = 5_000_000  # container items size_of may walk in one render
RENDER_SECONDS = 5.0  # one render's time budget
MAX_EXPONENT_BITS = 65_536  # of an integer built by ** or *
_OPAQUE_CHARS = 100  # str() of a datetime, a macro, a range...


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.iterations = MAX_LOOP_ITERATIONS
        self.sizing = MAX_SIZING_STEPS

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise SecurityError(f"rendering took longer than {RENDER_SECONDS:g}s")


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("raftsched_render_budget")


def new_budget() -> contextvars.Token[_Budget]:
    """Start one render's budget (reset it with ``_budget.reset(token)``: :func:`end_budget`)."""
    return _budget.set(_Budget())


def end_budget(token: contextvars.Token[_Budget]) -> None:
    _budget.reset(token)


def current_budget() -> _Budget:
    """The budget of the render under way (LookupError outside a render)."""
    return _budget.get()


def tick() -> None:
    budget = _budget.get(None)
    if budget is not None:
        budget.tick()


def too_large(what: str, size: int) -> SecurityError:
    shown = size if size <= 10**15 else "over 10**15"
    return SecurityError(
        f"{what} is too large: it would be {shown} characters long (at most {MAX_VALUE_CHARS})"
    )


# -- sizes ------------------------------------------------------------------------------------


def size_of(value: Any, limit: int = MAX_VALUE_CHARS) -> int:
    """About how many characters ``str(value)`` has, counted without building it; stops once
    past ``limit`` (the answer is then some number above it). Shared items count each time
    they appear, as they would in the text."""
    budget = _budget.get(None)
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() * 30103 // 100_000 + 2  # decimal digits, and a sign
        elif isinstance(item, float):
            total += len(repr(item))
        elif isinstance(item, bytes | bytearray):
            total += 4 * len(item) + 3
        elif isinstance(item, dict | list | tuple | set | frozenset):
            total += 2 + 4 * len(item)
            if total > limit:
                return total
            if budget is not None:
                budget.sizing -= len(item)
                if budget.sizing < 0:
                    raise SecurityError(
                        f"the template measured more than {MAX_SIZING_STEPS} items: it does"
                        " too much work"
                    )
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                stack.extend(item)
        else:
            total += _OPAQUE_CHARS
        if total > limit:
            return total
    return total


def check_value(value: Any, what: str) -> Any:
    """``value`` when its text is within MAX_VALUE_CHARS, else SecurityError."""
    size = size_of(value)
    if size > MAX_VALUE_CHARS:
        raise too_large(what, size)
    return value


def check_args(args: Iterable[Any]) -> None:
    for value in args:  # "x".ljust(10**9), "x"|center(10**9), (1).to_bytes(10**9), ...
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE_CHARS:
            shown = value if value.bit_length() < 64 else f"of {size_of(value)} digits"
            raise SecurityError(f"argument {shown} is too large (at most {MAX_VALUE_CHARS})")


def bounded_items(iterable: Iterable[Any], what: str) -> list[Any]:
    """``list(iterable)``, given up on as soon as the items' text passes MAX_VALUE_CHARS (a
    generator such as ``|batch(1)`` is never materialized whole to be measured)."""
    if isinstance(iterable, str | list | tuple):
        check_value(iterable, what)
        return list(iterable)
    items: list[Any] = []
    total = 0
    for item in iterable:
        total += size_of(item) + 1
        if total > MAX_VALUE_CHARS:
            raise too_large(what, total)
        items.append(item)
    return items


# -- %-formatting and str.format: widths and precisions, before formatting --------------------

_PERCENT = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?[hlL]?"
    r"(?P<conv>.?)"
)
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d+)?[,_]?(?:\.(?P<prec>\d+))?")


def _field_size(value: Any, width: int, prec: int | None, conv: str) -> int:
    for name, number in (("width", width), ("precision", prec or 0)):
        if number > MAX_VALUE_CHARS:
            raise SecurityError(f"a {name} of {number} is too large (at most {MAX_VALUE_CHARS})")
    text = size_of(value)
    if prec is not None and conv in "sra":
        text = min(text, prec)
    elif conv in "fF%" and isinstance(value, float) and math.isfinite(value):
        text = len(f"{abs(value):.0f}") + 3 + (6 if prec is None else prec)  # 1e308: 309 digits
    elif prec is not None:
        text += prec
    return max(width, text)


def percent_size(fmt: str, values: Any) -> int:
    """Characters ``fmt % values`` at most has (SecurityError for a width or precision past
    the bound)."""
    args = list(values) if isinstance(values, tuple) else [values]
    mapping = values if isinstance(values, dict) else None
    total = len(fmt)
    position = 0

    def take() -> Any:
        nonlocal position
        value = args[position] if position < len(args) else 0
        position += 1
        return value

    for match in _PERCENT.finditer(fmt):
        if match["conv"] == "%":
            continue
        width_text, prec_text = match["width"], match["prec"]
        width = abs(int(take())) if width_text == "*" else int(width_text or 0)
        prec: int | None = None
        if prec_text == "*":
            prec = abs(int(take()))
        elif prec_text is not None:
            prec = int(prec_text or 0)
        if match["key"] is not None and mapping is not None:
            value = mapping.get(match["key"], "")
        else:
            value = take()
        total += _field_size(value, width, prec, match["conv"] or "s")
        if total > MAX_VALUE_CHARS:
            raise too_large("the %-formatted text", total)
    return total


class BoundedFormatter(SandboxedFormatter):
    """``str.format``: each field's width and precision checked before it is formatted, and
    the fields' sizes summed."""

    total = 0

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self.total = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        match = _SPEC.match(format_spec)
        width = int(match["width"] or 0) if match else 0
        prec = int(match["prec"]) if match and match["prec"] is not None else None
        self.total += _field_size(value, width, prec, format_spec[-1:] or "s")
        if self.total > MAX_VALUE_CHARS:
            raise too_large("the formatted text", self.total)
        return super().format_field(value, format_spec)


class BoundedEscapeFormatter(BoundedFormatter, SandboxedEscapeFormatter):
    pass


# -- the sizes of what the multiplying operations make -----------------------------------------


def join_size(items: list[Any] | str, separator: Any) -> int:
    """The length of ``separator.join(items)`` (a str joins its characters)."""
    sep = size_of(separator)
    total = sep * max(len(items) - 1, 0)
    if isinstance(items, str):
        return total + len(items)
    for item in items:
        if total > MAX_VALUE_CHARS:
            break
        total += size_of(item)
    return total


def replace_size(text: str, old: str, new: str, count: Any = -1) -> int:
    found = text.count(old)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old))


def line_count(text: str) -> int:
    return text.count("\n") + 1


def str_method_size(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The size a str method called on ``obj.__self__`` makes, when it can multiply."""
    text, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(text, str):
        return None
    if name == "join" and args:  # (the caller made args[0] a str or a list)
        return join_size(args[0], text)
    if name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        return replace_size(text, old, new, args[2] if len(args) > 2 else -1)
    if name == "expandtabs":
        tab = (args or (kwargs.get("tabsize", 8),))[0]
        return len(text) + text.count("\t") * max(int(tab), 0)
    if name == "translate" and args and isinstance(args[0], dict):
        most = max((size_of(v) for v in args[0].values()), default=1)
        return len(text) * max(most, 1)
    return None


def json_size(value: Any, indent: int) -> int:
    """About how long ``json.dumps(value, indent=indent)`` is: the value's text (escapes up
    to 6 characters each) and, with an indent, every item on its own line indented by its
    depth (a deep value with ``indent=999999`` is gigabytes of spaces)."""
    total = 6 * size_of(value)
    if indent <= 0 or total > MAX_VALUE_CHARS:
        return total
    budget = _budget.get(None)
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        total += depth * indent + 1
        if total > MAX_VALUE_CHARS:
            return total
        if isinstance(item, dict | list | tuple):
            if budget is not None:
                budget.sizing -= len(item)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
            total += depth * indent + 1  # the closing bracket's line
    return total
