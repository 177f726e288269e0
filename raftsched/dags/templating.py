"""Task templates: a bash task's command and env values and a Python task's kwargs (string
values, recursively) rendered with Jinja2 just before an attempt starts.

    BashTask("export", command="dump --day {{ ds }} --region {{ params.region }}")

What a template sees (:func:`template_context`): ``ds`` (``YYYY-MM-DD`` of the logical date, UTC),
``ds_nodash``, ``ts`` (ISO-8601), ``ts_nodash``, ``logical_date``, ``data_interval_start``,
``data_interval_end`` (aware UTC datetimes; rendered as ISO-8601), ``run_id``, ``dag_id``,
``task_id``, ``try_number``, ``conf`` (the run's conf) and ``params`` (the DAG's param defaults
with the run's conf on top, see :mod:`raftsched.dags.params`).

One function renders for both places, so the task page shows what the attempt ran:
:func:`render_assignment` on the worker (raftsched/worker/runner.py) and
:func:`render_for_display` in the API and web UI, from the run's committed conf and dates.
Only a text holding ``{{`` or ``{%`` is rendered: other texts are used as written.

Safety: the environment is Jinja2's ``ImmutableSandboxedEnvironment`` (no ``__class__``, no
attribute starting with ``_``, no mutating lists or dicts) with ``StrictUndefined`` (an unknown
name is an error, never an empty string). Rendering is bounded: each output at most
MAX_RENDERED_CHARS, every loop shares MAX_LOOP_ITERATIONS, ``*`` and ``**`` and width
arguments may not build huge values, and a render gives up after RENDER_SECONDS. A template
that breaks any of this raises :class:`TemplateError` (line and cause): the attempt fails with
it as its message; the worker carries on.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jinja2 import StrictUndefined, nodes
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from raftsched.core import mapping
from raftsched.dags import template_names
from raftsched.dags.params import effective_params

if TYPE_CHECKING:
    from raftsched.core.model import TaskSpec
    from raftsched.worker.transport import Assignment

MAX_RENDERED_CHARS = 1_000_000  # one rendered value (a command, an env value, a kwarg)
MAX_LOOP_ITERATIONS = 100_000  # all {% for %} loops of one render together
RENDER_SECONDS = 5.0  # one render's time budget
MAX_EXPONENT_BITS = 65_536  # of an integer built by **
MARKERS = ("{{", "{%")  # not "{#": bash's ${#array[@]} is no template
_ITER_NAME = "raftsched_bounded_loop"


class TemplateError(Exception):
    """A template that cannot be rendered: names what (``command``, ``env[X]``, ``kwargs.x``),
    the line, and the cause."""


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.iterations = MAX_LOOP_ITERATIONS

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise SecurityError(f"rendering took longer than {RENDER_SECONDS:g}s")


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("raftsched_render_budget")


def _tick() -> None:
    budget = _budget.get(None)
    if budget is not None:
        budget.tick()


def _bounded_loop(iterable: Iterable[Any]) -> Iterator[Any]:
    """What every ``{% for %}`` iterates (see :func:`_bound_loops`): shares one budget."""
    budget = _budget.get()
    for item in iterable:
        budget.iterations -= 1
        if budget.iterations < 0:
            raise SecurityError(f"loops ran more than {MAX_LOOP_ITERATIONS} iterations")
        budget.tick()
        yield item


def _check_size(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS:
        raise SecurityError(f"argument {value} is too large (at most {MAX_RENDERED_CHARS})")


class _Environment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(times, int)
                if sized and len(seq) * times > MAX_RENDERED_CHARS:
                    raise SecurityError(
                        f"a value of {len(seq) * times} items is too large"
                        f" (at most {MAX_RENDERED_CHARS})"
                    )
        if operator == "**" and isinstance(left, int) and isinstance(right, int):  # noqa: SIM102
            if abs(left) > 1 and abs(left).bit_length() * right > MAX_EXPONENT_BITS:
                raise SecurityError(f"{left} ** {right} is too large")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        for value in (*args, *kwargs.values()):
            _check_size(value)  # "x".ljust(10**9), "x".center(10**9), ...
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)


def _bounded_filter(name: str, original: Any) -> Any:
    def checked(*args: Any, **kwargs: Any) -> Any:
        for value in (*args[1:], *kwargs.values()):
            _check_size(value)
        return original(*args, **kwargs)

    checked.__name__ = name
    return checked


def _make_environment() -> _Environment:
    env = _Environment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    for name in ("center", "indent", "wordwrap", "truncate", "format", "filesizeformat"):
        if name in env.filters:
            env.filters[name] = _bounded_filter(name, env.filters[name])
    env.globals.pop("namespace", None)  # mutable accumulation across loop iterations
    env.globals.pop("cycler", None)
    env.globals.pop("joiner", None)
    env.globals[_ITER_NAME] = _bounded_loop
    return env


_ENV = _make_environment()


def _bound_loops(tree: nodes.Template) -> nodes.Template:
    """Every ``{% for x in ITER %}`` iterates ``raftsched_bounded_loop(ITER)`` instead."""
    for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Call(
            nodes.Name(_ITER_NAME, "load", lineno=loop.lineno),
            [loop.iter],
            [],
            None,
            None,
            lineno=loop.lineno,
        )
    return tree


class _TemplateDateTime(datetime):
    """A datetime that renders as ISO-8601 (``{{ logical_date }}``), as Airflow's does."""

    def __str__(self) -> str:
        return self.isoformat()


def _template_datetime(value: datetime | str | None) -> _TemplateDateTime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value) if value else None
    if value is None:
        return None
    utc = value.astimezone(UTC)
    return _TemplateDateTime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, UTC
    )


def template_context(
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    try_number: int,
    logical_date: datetime | str | None,
    data_interval_start: datetime | str | None,
    data_interval_end: datetime | str | None,
    conf: Mapping[str, Any],
    params_json: str = "",
    task_env: Iterable[tuple[str, str]] = (),
    secret_env: Iterable[tuple[str, str]] | None = None,
    upstream_results: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The names a template sees (datetimes aware UTC or ISO text; "" or None: unknown);
    ``task_env`` (the task's spec env) may ask for Airflow 2's dates (dags.template_names)."""
    logical = _template_datetime(logical_date)
    ds = logical.strftime("%Y-%m-%d") if logical else ""
    ts = logical.isoformat() if logical else ""
    base = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": mapping.split_id(task_id)[1],  # -1: not an instance of a mapped task
        "try_number": try_number,
        "logical_date": logical,
        "data_interval_start": _template_datetime(data_interval_start),
        "data_interval_end": _template_datetime(data_interval_end),
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": ts,
        "ts_nodash": logical.strftime("%Y%m%dT%H%M%S") if logical else "",
        "conf": json.loads(json.dumps(dict(conf))),  # a copy the template cannot share
        "params": effective_params(params_json, conf),
    }
    # Airflow's names: macros, var, ti.xcom_pull, dag_run, its dates (dags.template_names)
    return template_names.extend(base, task_env, secret_env, upstream_results)


def is_template(text: object) -> bool:
    return isinstance(text, str) and any(marker in text for marker in MARKERS)


def render_text(text: str, context: Mapping[str, Any], what: str) -> str:
    """``text`` rendered, or as it is when it holds no template marker. TemplateError names
    ``what``, the line and the cause."""
    if not is_template(text):
        return text
    token = _budget.set(_Budget())
    try:
        template = _ENV.from_string(_bound_loops(_ENV.parse(text)))
        out: list[str] = []
        size = 0
        for chunk in template.generate(dict(context)):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise SecurityError(f"the output is longer than {MAX_RENDERED_CHARS} characters")
            _tick()
            out.append(chunk)
        return "".join(out)
    except (JinjaTemplateError, ArithmeticError, TypeError, ValueError, LookupError) as err:
        raise TemplateError(f"template error in {what}{_line_of(err)}: {_describe(err)}") from None
    except (RecursionError, MemoryError) as err:
        raise TemplateError(f"template error in {what}: {type(err).__name__}") from None
    finally:
        _budget.reset(token)


def _line_of(err: BaseException) -> str:
    lineno = getattr(err, "lineno", None)
    tb = err.__traceback__
    while tb is not None:  # the innermost frame of the template's own code
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return f", line {lineno}" if lineno else ""


def _describe(err: BaseException) -> str:
    text = str(getattr(err, "message", None) or err) or type(err).__name__
    if isinstance(err, SecurityError):
        text = f"refused by the sandbox: {text}"
    return text[:500]


def _render_json(value: Any, context: Mapping[str, Any], what: str) -> Any:
    """Strings inside a JSON value rendered (dict keys stay as written). Iterative: kwargs
    may nest deep."""
    if isinstance(value, str):
        return render_text(value, context, what)
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, str]] = [(value, root, 0, what)]
    while stack:
        item, parent, slot, path = stack.pop()
        if isinstance(item, dict):
            copy: Any = {}
            for key, sub in item.items():
                stack.append((sub, copy, key, f"{path}.{key}"))
        elif isinstance(item, list):
            copy = [None] * len(item)
            for i, sub in enumerate(item):
                stack.append((sub, copy, i, f"{path}[{i}]"))
        elif isinstance(item, str):
            copy = render_text(item, context, path)
        else:
            copy = item
        parent[slot] = copy
    return root[0]


@dataclass(frozen=True, slots=True)
class RenderedTask:
    command: str
    env: tuple[tuple[str, str], ...]
    kwargs: dict[str, Any]


def render_task(
    *,
    command: str,
    env: Iterable[tuple[str, str]],
    kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> RenderedTask:
    """A task's templated fields rendered with ``context`` (TemplateError on the first that
    cannot be)."""
    return RenderedTask(
        command=render_text(command, context, "command"),
        env=tuple((name, render_text(value, context, f"env[{name}]")) for name, value in env),
        kwargs=_render_json(dict(kwargs), context, "kwargs"),
    )


def render_assignment(assignment: Assignment) -> Assignment:
    """The attempt with its command, env values and kwargs rendered (the worker, just before
    the attempt starts). Raises TemplateError."""
    a = assignment
    context = template_context(
        dag_id=a.key.dag_id,
        run_id=a.key.run_id,
        task_id=a.key.task_id,
        try_number=a.try_number,
        logical_date=a.logical_date,
        data_interval_start=a.data_interval_start,
        data_interval_end=a.data_interval_end,
        conf=a.conf,
        params_json=a.params_json,
        task_env=a.env,
        secret_env=a.secret_env,
        upstream_results=a.upstream_results,
    )
    rendered = render_task(command=a.command, env=a.env, kwargs=a.kwargs, context=context)
    if (rendered.command, rendered.env, rendered.kwargs) == (a.command, a.env, dict(a.kwargs)):
        return a
    return replace(a, command=rendered.command, env=rendered.env, kwargs=rendered.kwargs)


def render_for_display(
    task: TaskSpec,
    *,
    dag_id: str,
    run_id: str,
    try_number: int,
    logical_date: datetime | None,
    data_interval_start: datetime | None,
    data_interval_end: datetime | None,
    conf: Mapping[str, Any],
    params_json: str,
) -> dict[str, Any]:
    """What the task's attempt ``try_number`` of run ``run_id`` runs (or ran): ``{"command",
    "env", "kwargs"}`` as rendered, or ``{"error": text}`` when a template cannot be. For the
    task page and `raftsched tasks render`; the same rendering as the worker's."""
    context = template_context(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task.task_id,
        try_number=max(try_number, 1),
        logical_date=logical_date,
        data_interval_start=data_interval_start,
        data_interval_end=data_interval_end,
        conf=conf,
        params_json=params_json,
        task_env=task.env,
    )
    try:
        rendered = render_task(
            command=task.command or "",
            env=task.env,
            kwargs=json.loads(task.kwargs_json or "{}"),
            context=context,
        )
    except TemplateError as err:
        return {"error": str(err)}
    out: dict[str, Any] = {"env": [list(pair) for pair in rendered.env]}
    if task.kind == "python":
        out["kwargs"] = rendered.kwargs
    else:
        out["command"] = rendered.command
    return out
