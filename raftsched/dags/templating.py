"""Task templates: a bash task's command and env values and a Python task's kwargs (string
values, recursively) rendered with Jinja2 just before an attempt starts.

    BashTask("export", command="dump --day {{ ds }} --region {{ params.region }}")

What a template sees (:func:`template_context`): ``ds`` (``YYYY-MM-DD`` of the logical date, UTC),
``ds_nodash``, ``ts`` (ISO-8601), ``ts_nodash``, ``logical_date``, ``data_interval_start``,
``data_interval_end`` (aware UTC datetimes; rendered as ISO-8601), ``run_id``, ``dag_id``,
``task_id``, ``try_number``, ``conf`` (the run's conf), ``params`` (the DAG's param defaults
with the run's conf on top, see :mod:`raftsched.dags.params`) and ``fencing_token`` (the
attempt's lease token, docs/fencing-side-effects.md).

One function renders for both places, so the task page shows what the attempt ran:
:func:`render_assignment` on the worker (raftsched/worker/runner.py) and
:func:`render_for_display` in the API and web UI, from the run's committed conf and dates.
Only a text holding ``{{`` or ``{%`` is rendered: other texts are used as written.

Safety: the environment is Jinja2's ``ImmutableSandboxedEnvironment`` (no ``__class__``, no
attribute starting with ``_``, no mutating lists or dicts) with ``StrictUndefined`` (an unknown
name is an error, never an empty string), bounded by :mod:`raftsched.dags.sandbox`: each output
at most MAX_RENDERED_CHARS, every value's size computed before it is built (``%``, ``*``,
``format`` widths, ``join``, ``replace``, ...), loops share MAX_LOOP_ITERATIONS, a render gives
up after RENDER_SECONDS. :func:`render_task` (the worker, the task page, ``tasks render``) runs
in a helper process with a memory limit and a deadline (:mod:`raftsched.dags.render_limits`)
when a field holds a template; templates are compiled once (COMPILED_CACHE_SIZE kept). A
template that breaks any of this raises :class:`TemplateError` (line and cause): the attempt
fails with it as its message; the worker carries on.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jinja2 import Template
from jinja2.sandbox import SecurityError

from raftsched.core import mapping
from raftsched.dags import render_limits, sandbox, template_names
from raftsched.dags.assets import triggering_events
from raftsched.dags.params import effective_params
from raftsched.dags.sandbox import MAX_RENDERED_CHARS
from raftsched.errors import RenderLimitExceeded, TemplateError

__all__ = ["MAX_RENDERED_CHARS", "TemplateError", "render_fields", "render_task", "render_text"]

if TYPE_CHECKING:
    from raftsched.core.model import TaskSpec
    from raftsched.worker.transport import Assignment

COMPILED_CACHE_SIZE = 256  # templates kept compiled (each at most limits.MAX_COMMAND_CHARS)
MARKERS = ("{{", "{%")  # not "{#": bash's ${#array[@]} is no template
_ENV = sandbox.make_environment()


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
    fencing_token: int | None = None,
    asset_events_json: str = "",
) -> dict[str, Any]:
    """The names a template sees (datetimes aware UTC or ISO text; "" or None: unknown);
    ``task_env`` (the task's spec env) may ask for Airflow 2's dates (dags.template_names);
    ``fencing_token``: the attempt's lease token (None where no attempt holds a lease, as on
    the task page)."""
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
        "fencing_token": fencing_token,
        # an asset-triggered run's events by URI (raftsched.dags.assets), Airflow 3 and 2 names
        "triggering_asset_events": triggering_events(asset_events_json),
    }
    base["triggering_dataset_events"] = base["triggering_asset_events"]
    # Airflow's names: macros, var, ti.xcom_pull, dag_run, its dates (dags.template_names)
    return template_names.extend(base, task_env, secret_env, upstream_results)


def is_template(text: object) -> bool:
    return isinstance(text, str) and any(marker in text for marker in MARKERS)


@functools.lru_cache(maxsize=COMPILED_CACHE_SIZE)
def _compiled(text: str) -> Template:
    """``text`` parsed, bounded and compiled once: compiling costs far more than rendering,
    and the worker renders the same task's templates attempt after attempt. A template that
    does not compile raises each time (lru_cache keeps no exception)."""
    template = _ENV.from_string(sandbox.bound(_ENV.parse(text)))
    sandbox.bound_joins(template.root_render_func.__globals__)
    return template


def render_text(text: str, context: Mapping[str, Any], what: str) -> str:
    """``text`` rendered, or as it is when it holds no template marker. TemplateError names
    ``what``, the line and the cause."""
    if not is_template(text):
        return text
    token = sandbox.new_budget()
    try:
        template = _compiled(text)
        out: list[str] = []
        size = 0
        for chunk in template.generate(dict(context)):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise SecurityError(f"the output is longer than {MAX_RENDERED_CHARS} characters")
            out.append(chunk)
        return "".join(out)
    except RecursionError:
        raise TemplateError(f"template error in {what}: nested too deeply") from None
    except MemoryError:
        raise TemplateError(
            f"template error in {what}: refused by the sandbox: rendering needed more memory"
            " than it may use"
        ) from None
    except Exception as err:  # a filter or method may raise anything: the attempt fails
        raise TemplateError(f"template error in {what}{_line_of(err)}: {_describe(err)}") from None
    finally:
        sandbox.end_budget(token)


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
    cannot be); in this process's render helper, under a memory limit and a deadline
    (:mod:`raftsched.dags.render_limits`), when one of them holds a template."""
    fields = {"command": command, "env": tuple(env), "kwargs": dict(kwargs), "context": context}
    templated = is_template(command) or any(is_template(v) for _, v in fields["env"])
    if not (templated or _has_template(fields["kwargs"])):
        return render_fields(**fields)
    fields["context"] = dict(context)
    try:
        rendered = render_limits.run_limited(("task", fields))
    except RenderLimitExceeded as err:
        raise TemplateError(f"template error: refused by the sandbox: {err}") from None
    assert isinstance(rendered, RenderedTask)
    return rendered


def render_fields(
    *,
    command: str,
    env: tuple[tuple[str, str], ...],
    kwargs: dict[str, Any],
    context: Mapping[str, Any],
) -> RenderedTask:
    """:func:`render_task`'s work, in the calling process (the render helper calls it)."""
    return RenderedTask(
        command=render_text(command, context, "command"),
        env=tuple((name, render_text(value, context, f"env[{name}]")) for name, value in env),
        kwargs=_render_json(kwargs, context, "kwargs"),
    )


def _has_template(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif is_template(item):
            return True
    return False


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
        fencing_token=a.token,
        asset_events_json=a.asset_events_json,
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
    asset_events_json: str = "",
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
        asset_events_json=asset_events_json,
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
