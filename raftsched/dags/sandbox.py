"""The Jinja2 sandbox task templates render in (:mod:`raftsched.dags.templating`), and its
bounds on the WORK a template does, checked before a value is built, not after.

A size check on the output alone comes too late: ``"%0300000000d" % 1`` builds 1.1 GiB before
anyone measures it. So every way a template makes a big value from small ones is intercepted
and its result's size computed from its inputs first: ``*``, ``+`` and ``%`` on strings and
sequences (:meth:`_Environment.call_binop`); ``str.format``/``format_map`` widths and
precisions (:class:`_BoundedFormatter`); ``~`` and the buffers of macros, ``{% set %}`` and
``{% filter %}`` blocks (:func:`_bounded_str_join`, ``concat``); ``str.join``, ``replace``,
``expandtabs``, ``translate`` and the filters that multiply (``join``, ``replace``,
``indent``, ``wordwrap``, ``format``); list, tuple and dict literals; and every call's and
filter's result is measured before anything can stringify it (a list holding one string 999
times is small in memory and 1 GB as text). A value may hold at most MAX_VALUE_CHARS
characters as text (measured by :mod:`raftsched.dags.template_sizes`, which stops counting
past the bound and charges what it walks to the render's budget). Loops share
MAX_LOOP_ITERATIONS, a render RENDER_SECONDS.

What still slips through (a bug here, or a way we did not think of) meets the memory and CPU
limits of the child process the render runs in (:mod:`raftsched.dags.render_limits`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import StrictUndefined, nodes
from jinja2.runtime import Macro, Markup  # (markupsafe's, re-exported: jinja2 is ours)
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer

from raftsched.dags import template_sizes as sizes
from raftsched.dags.template_sizes import (
    MAX_EXPONENT_BITS,
    MAX_LOOP_ITERATIONS,
    MAX_RENDERED_CHARS,
    MAX_VALUE_CHARS,
    RENDER_SECONDS,
    check_value,
    end_budget,
    new_budget,
    size_of,
)

__all__ = ["MAX_RENDERED_CHARS", "RENDER_SECONDS", "bound", "bound_joins", "end_budget"]
__all__ += ["make_environment", "new_budget"]

MAX_LIPSUM_PARAGRAPHS = 100
_ITER_NAME = "raftsched_bounded_loop"
_SIZED_NAME = "raftsched_sized"


class _Environment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        sizes.tick()
        size = 0
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int) and times > 0:
                    size = size_of(seq, MAX_VALUE_CHARS // times + 1) * times
            ints = isinstance(left, int) and isinstance(right, int)
            if ints and left.bit_length() + right.bit_length() > MAX_EXPONENT_BITS:
                raise SecurityError(f"{left} * {right} is too large")
        elif operator == "+" and isinstance(left, str | list | tuple):
            size = size_of(left) + size_of(right)
        elif operator == "%" and isinstance(left, str):
            size = sizes.percent_size(left, right)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):  # noqa: SIM102
            if abs(left) > 1 and abs(left).bit_length() * right > MAX_EXPONENT_BITS:
                raise SecurityError(f"{left} ** {right} is too large")
        if size > MAX_VALUE_CHARS:
            raise sizes.too_large(f"the result of {operator}", size)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.tick()
        if not getattr(__obj, "raftsched_format", False):  # format's widths are checked apart
            sizes.check_args((*args, *kwargs.values()))
        if isinstance(__obj, Macro):  # its output is bounded by concat, its args by size_of
            return super().call(__context, __obj, *args, **kwargs)
        if _is_str_join(__obj) and args and not isinstance(args[0], str):
            args = (sizes.bounded_items(args[0], "the result of join"), *args[1:])  # measured
        size = sizes.str_method_size(__obj, args, kwargs)
        if size is not None and size > MAX_VALUE_CHARS:
            raise sizes.too_large(f"the result of {getattr(__obj, '__name__', 'the call')}", size)
        result = super().call(__context, __obj, *args, **kwargs)
        return check_value(result, f"the result of {getattr(__obj, '__name__', 'a call')}")

    def getattr(self, obj: Any, attribute: str) -> Any:
        sizes.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        sizes.tick()  # also what |groupby, |sort(attribute=...) call for every item
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text: str = value.__self__
        formatter: sizes.BoundedFormatter
        if isinstance(text, Markup):
            formatter = sizes.BoundedEscapeFormatter(self, escape=text.escape)
        else:
            formatter = sizes.BoundedFormatter(self)
        as_map = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            if as_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                args, kwargs = (), args[0]
            return type(text)(formatter.vformat(text, args, kwargs))

        bounded.raftsched_format = True  # type: ignore[attr-defined]
        return bounded


def _is_str_join(obj: Any) -> bool:
    return (
        isinstance(getattr(obj, "__self__", None), str) and getattr(obj, "__name__", "") == "join"
    )


# -- filters ----------------------------------------------------------------------------------


def _pre_join(value: Any, d: Any = "", attribute: Any = None) -> tuple[Any, int]:
    if isinstance(value, str):
        return value, sizes.join_size(value, d)
    items = sizes.bounded_items(value, "the result of |join")
    return items, sizes.join_size(items, d)


def _pre_list(value: Any) -> tuple[Any, int]:
    return sizes.bounded_items(value, "the result of |list"), 0


def _pre_iterator(value: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """A generator (``|batch``, ``|map``, ...) that a filter would materialize whole (sort,
    unique, groupby, sum, ...) is taken item by item, and given up on past the bound."""
    if isinstance(value, str | bytes | dict | list | tuple | set | frozenset | range):
        return value, 0
    return sizes.bounded_items(value, "a filter's input"), 0


def _pre_replace(value: Any, old: Any, new: Any, count: Any = None) -> tuple[Any, int]:
    text = str(value)
    return value, sizes.replace_size(text, str(old), str(new), -1 if count is None else count)


def _pre_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    text = str(value)
    per_line = width if isinstance(width, int) else size_of(width)
    return value, len(text) + sizes.line_count(text) * max(per_line, 0)


def _pre_wordwrap(
    value: Any, width: int = 79, long_words: Any = True, wrapstring: Any = None, *_: Any, **__: Any
) -> tuple[Any, int]:
    text = str(value)
    breaks = len(text.split()) + len(text) // max(int(width), 1) + sizes.line_count(text)
    return value, len(text) + breaks * max(size_of(wrapstring or "\n"), 1)


def _pre_tojson(value: Any, indent: Any = None) -> tuple[Any, int]:
    return value, sizes.json_size(value, indent if isinstance(indent, int) else 0)


def _pre_urlize(value: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Every word may become ``<a href="WORD" rel=".." target="..">WORD</a>``, escaped."""
    text = str(value)
    per_link = sum(size_of(a) for a in (*args, *kwargs.values()) if isinstance(a, str))
    return value, 6 * len(text) + len(text.split()) * (per_link + 60)


def _pre_format(value: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    return value, sizes.percent_size(str(value), kwargs or args)


_PRE_CHECKS: dict[str, Callable[..., tuple[Any, int]]] = {
    "join": _pre_join,
    "list": _pre_list,
    "replace": _pre_replace,
    "indent": _pre_indent,
    "wordwrap": _pre_wordwrap,
    "format": _pre_format,
    "tojson": _pre_tojson,
    "urlize": _pre_urlize,
}
for _name in ("sort", "unique", "groupby", "sum", "min", "max", "reverse", "slice", "batch"):
    _PRE_CHECKS[_name] = _pre_iterator


def _bounded_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` with its arguments checked, its result's size computed first where the
    filter multiplies (_PRE_CHECKS), and its result measured before anything stringifies it."""
    passed = 1 if _PassArg.from_obj(original) is not None else 0
    pre = _PRE_CHECKS.get(name)

    @functools.wraps(original)  # keeps jinja_pass_arg
    def bounded(*args: Any, **kwargs: Any) -> Any:
        sizes.tick()
        if name != "format":  # its values are no sizes: _pre_format checks its widths
            sizes.check_args((*args[passed + 1 :], *kwargs.values()))
        if pre is not None and len(args) > passed:
            value, size = pre(*args[passed:], **kwargs)
            if size > MAX_VALUE_CHARS:
                raise sizes.too_large(f"the result of |{name}", size)
            args = (*args[:passed], value, *args[passed + 1 :])
        return check_value(original(*args, **kwargs), f"the result of |{name}")

    return bounded


# -- ~, macros, blocks and literals -------------------------------------------------------------


def _bounded_concat(parts: Iterable[str]) -> str:
    """``"".join`` of a macro's, a {% set %} or a {% filter %} block's output, measured first."""
    items = list(parts)
    size = sum(map(len, items))
    if size > MAX_VALUE_CHARS:
        raise sizes.too_large("a macro's or block's output", size)
    return "".join(items)


def _bounded_str_join(parts: Iterable[Any]) -> str:
    """``a ~ b ~ c``, measured before the strings are made."""
    items = list(parts)
    size = sizes.join_size(items, "")
    if size > MAX_VALUE_CHARS:
        raise sizes.too_large("the result of ~", size)
    return "".join(map(str, items))


def _bounded_loop(iterable: Iterable[Any]) -> Iterator[Any]:
    """What every ``{% for %}`` iterates (see :class:`_Bounds`): shares one budget."""
    budget = sizes.current_budget()
    for item in iterable:
        budget.iterations -= 1
        if budget.iterations < 0:
            raise SecurityError(f"loops ran more than {MAX_LOOP_ITERATIONS} iterations")
        budget.tick()
        yield item


def _sized(value: Any) -> Any:
    return check_value(value, "a list, tuple or dict literal")


class _Bounds(NodeTransformer):
    """``{% for x in ITER %}`` iterates ``raftsched_bounded_loop(ITER)``; a list, tuple or dict
    literal is ``raftsched_sized(LITERAL)``."""

    def _call(self, name: str, node: nodes.Node) -> nodes.Call:
        return nodes.Call(nodes.Name(name, "load"), [node], [], None, None, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self._call(_ITER_NAME, node.iter)
        return node

    def _literal(self, node: nodes.Node) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":
            return node  # an assignment target: {% set a, b = ... %}
        return self._call(_SIZED_NAME, node)

    visit_List = visit_Tuple = visit_Dict = _literal


def bound(tree: nodes.Template) -> nodes.Template:
    """``tree`` with its loops and literals bounded (see :class:`_Bounds`)."""
    result = _Bounds().visit(tree)
    assert isinstance(result, nodes.Template)
    return result


def bound_joins(namespace: dict[str, Any]) -> None:
    """A compiled template's module namespace with ``~`` measured (it calls ``str_join``)."""
    namespace["str_join"] = namespace["markup_join"] = _bounded_str_join


def _lipsum(lipsum: Callable[..., str]) -> Callable[..., str]:
    def bounded(n: int = 5, *args: Any, **kwargs: Any) -> str:
        if n > MAX_LIPSUM_PARAGRAPHS:
            raise SecurityError(f"lipsum of {n} paragraphs (at most {MAX_LIPSUM_PARAGRAPHS})")
        return lipsum(n, *args, **kwargs)

    return bounded


def make_environment() -> _Environment:
    env = _Environment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.concat = _bounded_concat  # type: ignore[method-assign]
    for name, original in list(env.filters.items()):
        env.filters[name] = _bounded_filter(name, original)
    env.globals.pop("namespace", None)  # mutable accumulation across loop iterations
    env.globals.pop("cycler", None)
    env.globals.pop("joiner", None)
    env.globals["lipsum"] = _lipsum(env.globals["lipsum"])
    env.globals[_ITER_NAME] = _bounded_loop
    env.globals[_SIZED_NAME] = _sized
    return env
