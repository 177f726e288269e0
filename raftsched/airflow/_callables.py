"""How an Airflow Python task's function is called on the worker.

Every Python task of this layer (``PythonOperator`` and its branch/short-circuit kinds, and
``@task`` functions) registers an :class:`AirflowCallable` under its TaskFlow name
(``@taskflow:DAG:TASK``), so the worker finds it again when it imports the DAG file (the
function may be a lambda or nested). Called with the task's kwargs, as the worker rendered
them, it:

1. builds the Airflow context (:mod:`raftsched.airflow._context`), makes it current for
   ``get_current_context()``, and checks the run's params against their full JSON Schemas;
2. with ``render_template_as_native_obj``, turns each rendered string whose source was a
   template into the Python literal it spells (Airflow's NativeEnvironment: ``"[1, 2]"`` is
   a list), else leaves it a string;
3. passes the context keys the function declares (or all of them to ``**kwargs``), never
   overriding an argument the task gives;
4. makes the result what the worker expects: a branch's ids; for a short circuit, all or
   none of the direct downstream tasks.
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from raftsched.airflow import _context
from raftsched.airflow._param import check_run_params
from raftsched.dags import xcom_map
from raftsched.dags.assets import consume_metadata
from raftsched.dags.taskflow import TaskCallable
from raftsched.dags.templating import is_template

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

PYTHON, BRANCH, SHORT_CIRCUIT, BASH = "python", "branch", "short_circuit", "bash"
SENSOR = "sensor"  # @task.sensor: the function pokes (raftsched.airflow._sensors.poke_loop)


class AirflowCallable:
    """What the worker calls for an Airflow Python task (see the module docstring)."""

    def __init__(
        self,
        task: Task,
        function: Callable[..., Any],
        *,
        mode: str = PYTHON,
        classic: bool = False,  # PythonOperator: kwargs are op_args/op_kwargs/templates_dict
        multiple_outputs: bool = False,
        skip_on_exit_code: int | None = None,
        sensor: dict[str, Any] | None = None,
    ) -> None:
        self.sensor = sensor  # @task.sensor's poke_interval, timeout, mode, soft_fail
        self.task = task
        self.function = function
        self.mode = mode
        self.classic = classic
        self.multiple_outputs = multiple_outputs
        self.skip_on_exit_code = skip_on_exit_code
        self.branch = mode in (BRANCH, SHORT_CIRCUIT)  # _run_python: the value is "follow"
        self.raftsched_taskflow = not classic  # @task: a value past the XCom bounds fails

    def __call__(self, **kwargs: Any) -> Any:
        dag = self.task.dag
        upstream = kwargs.pop(_context.UPSTREAM_KEY, None)  # for ti.xcom_pull (_dag)
        if self.sensor is not None:  # (imported here: _sensors builds on _operators, on us)
            from raftsched.airflow import _sensors
        resumed = _sensors.resumed(kwargs) if self.sensor is not None else ""
        if getattr(dag, "render_template_as_native_obj", False):
            kwargs = _native(json.loads(self.task.kwargs_json or "{}"), kwargs)
        kwargs = xcom_map.apply(self, kwargs)  # a mapped item through its .map() functions
        templates_dict = kwargs.pop("templates_dict", None) if self.classic else None
        context = _context.build(self.task, upstream=upstream)
        context["templates_dict"] = templates_dict
        check_run_params(getattr(dag, "airflow_params", {}) or {}, context["params"])
        with _context.current(context):
            if self.classic:
                args = list(kwargs.get("op_args") or [])
                given = dict(kwargs.get("op_kwargs") or {})
            else:
                args, given = [], dict(kwargs)
            call = TaskCallable(
                lambda: _call(self.function, args, given, context),
                branch=False,
                bash=self.mode == BASH,
                skip_code=self.skip_on_exit_code,
            )
            if self.sensor is not None:  # pokes until done; reschedule: defers in between
                name = self.task.callable_name
                value = _sensors.poke_loop(self.sensor, call, name, given, resumed)
            else:  # a generator's Metadata go to outlet_events; its return value is kept
                value = consume_metadata(call())
        return self._result(value)

    def _result(self, value: Any) -> Any:
        if self.multiple_outputs and value is not None and not isinstance(value, dict):
            raise TypeError(
                f"multiple_outputs=True needs a dict return value, got {type(value).__name__}"
            )
        if self.mode != SHORT_CIRCUIT:
            return value
        if value:
            return sorted(t.task_id for t in self.task.dag.tasks.values() if self._below(t))
        print(f"raftsched: short circuit: {value!r} is falsy, downstream tasks are skipped")
        return []

    def _below(self, task: Task) -> bool:
        return self.task.task_id in task.upstream


def _call(
    function: Callable[..., Any],
    args: list[Any],
    given: dict[str, Any],
    context: Mapping[str, Any],
) -> Any:
    """``function(*args, **given)`` plus the context keys it declares (all of them when it
    takes ``**kwargs``); an argument the task gives is never replaced."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to inject
        return function(*args, **given)
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    positional = list(parameters)[: len(args)]
    for name, value in context.items():
        if name in given or name in positional:
            continue
        declared = name in parameters and parameters[name].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if declared or takes_all:
            given[name] = value
    return function(*args, **given)


def _native(source: Any, rendered: Any) -> Any:
    """``rendered`` with each string whose ``source`` was a template read as a literal."""
    if isinstance(source, dict) and isinstance(rendered, dict):
        return {k: _native(source.get(k), v) for k, v in rendered.items()}
    if isinstance(source, list) and isinstance(rendered, list) and len(source) == len(rendered):
        return [_native(s, r) for s, r in zip(source, rendered, strict=True)]
    if is_template(source) and isinstance(rendered, str):
        try:
            return ast.literal_eval(rendered)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return rendered
    return rendered


def register(task: Task, function: Callable[..., Any], **options: Any) -> None:
    """Make ``task`` (a TaskFlow-named python task) call ``function`` on the worker."""
    from raftsched.dags.taskflow import register as register_taskflow

    register_taskflow(task.dag.dag_id, task.task_id, AirflowCallable(task, function, **options))


__all__ = ["AirflowCallable", "register"]
