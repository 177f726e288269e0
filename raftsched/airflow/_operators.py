"""Airflow's operators as raftsched tasks, and the task arguments every one of them takes.

:func:`task_options` is the one place an Airflow task argument (given, or from the DAG's
``default_args``) becomes a raftsched option, is accepted and dropped (documentation, owner,
e-mail settings: no e-mail is sent, use ``on_failure_callback=EmailNotifier(...)``), or is
refused with what to do instead. The operators:

- ``BashOperator``: a ``BashTask``. ``bash_command`` ending in ``.sh``/``.bash`` is read
  from ``template_searchpath`` (else the DAG file's folder) when the file is parsed, as
  Airflow renders a template file; ``cwd`` becomes a ``cd`` before the command;
  ``skip_on_exit_code`` defaults to 99, as Airflow's.
- ``PythonOperator`` / ``BranchPythonOperator`` / ``ShortCircuitOperator``: Python tasks
  whose callable is called with ``op_args``, ``op_kwargs`` and the context it declares
  (:mod:`raftsched.airflow._callables`); ``op_args``, ``op_kwargs`` and ``templates_dict``
  are templated and must be JSON.
- ``EmptyOperator`` (``DummyOperator``): an ``EmptyTask``, which the scheduler finishes
  itself when its trigger rule is met: no worker, no slot, no process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from raftsched.airflow import _callables
from raftsched.airflow._context import mark_callbacks
from raftsched.airflow._unsupported import refuse
from raftsched.dags import task_groups
from raftsched.dags.dag import DAG, _context
from raftsched.dags.empty import EmptyTask
from raftsched.dags.taskflow import TaskFlowTask
from raftsched.dags.tasks import BashTask
from raftsched.dags.template_connections import named_connections
from raftsched.errors import DagDefinitionError

# raftsched Task options, by the same name
NATIVE = (
    "retries",
    "retry_delay",
    "retry_exponential_backoff",
    "max_retry_delay",
    "execution_timeout",
    "priority_weight",
    "trigger_rule",
    "queue",
    "pool",  # pools are set with `raftsched pools set NAME SLOTS` (README, Pools)
    "pool_slots",
    "outlets",  # assets (raftsched.dags.assets)
    "inlets",
    "on_failure_callback",
    "on_success_callback",
    "on_retry_callback",
    "secrets",  # raftsched's: the variables and connections the task reads
    "connections",
    "depends_on_past",  # core/past_deps.py
    "wait_for_downstream",
    "ignore_first_depends_on_past",
)
# accepted, no effect here (the migration guide says why)
DROPPED = frozenset(
    {
        "owner",
        "email",
        "email_on_failure",
        "email_on_retry",
        "doc",
        "doc_md",
        "doc_rst",
        "doc_json",
        "doc_yaml",
        "task_display_name",
        "weight_rule",
        "do_xcom_push",
        "executor_config",
        "resources",
        "ui_color",
        "ui_fgcolor",
        "start_date",  # the DAG's start_date decides; a task's own is ignored
        "end_date",
        "params",  # params are the DAG's
        "show_return_value_in_logs",
        "map_index_template",
    }
)
REFUSED = {
    "sla": "use DAG(deadline=timedelta(...), on_deadline_callback=...)",
    "on_execute_callback": "call the code at the start of the task",
    "on_skipped_callback": "use on_success_callback or a DAG callback",
    "run_as_user": "run the worker as that user",
    "max_active_tis_per_dag": "use the DAG's max_active_tasks",
    "max_active_tis_per_dagrun": "use the DAG's max_active_tasks",
    "executor": "use queue= and a worker for that queue",
}


# {{ var.value.NAME }}, {{ var.json.NAME }}, {{ var.value.get("NAME") }} in a template
_VARIABLE = re.compile(
    r"""\bvar\.(?:value|json)\.(?:get\(\s*\\?['"]([^'"\\]+)|([A-Za-z_][A-Za-z0-9_]*))"""
)


def template_variables(*values: Any) -> list[str]:
    """The variables the templates in ``values`` (texts, at any depth of JSON) name: an
    Airflow task declares them (``secrets=``), so the worker fetches them for it."""
    text = json.dumps(values, default=str)
    found = {a or b for a, b in _VARIABLE.findall(text)}
    return sorted(name for name in found if name != "get")


def declare_template_variables(options: dict[str, Any], *values: Any) -> dict[str, Any]:
    """``options`` with ``secrets`` = those it gives plus the ones the templates name, and
    ``connections`` likewise (``{{ conn.ID.host }}``: dags/template_connections.py)."""
    for option, named in (
        ("secrets", template_variables(*values)),
        ("connections", named_connections(json.dumps(values, default=str))),
    ):
        given = options.get(option) or []
        given = [given] if isinstance(given, str) else list(given)
        if named:
            options[option] = sorted({*given, *named})
    return options


def current_dag(dag: DAG | None) -> DAG:
    found = dag if dag is not None else (_context[-1] if _context else None)
    if not isinstance(found, DAG):
        raise DagDefinitionError(
            "an operator belongs to no DAG: create it inside `with DAG(...):` or pass dag="
        )
    return found


def task_options(dag: DAG, task_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The raftsched options of an Airflow task: the DAG's ``default_args``, then its task
    groups' (outer to inner), then ``given``."""
    merged = {**getattr(dag, "airflow_default_args", {}), **task_groups.default_args(), **given}
    out: dict[str, Any] = {}
    for name, value in merged.items():
        if name in NATIVE:
            if value is not None:
                out[name] = mark_callbacks(value) if name.endswith("_callback") else value
        elif name in DROPPED:
            continue
        elif name in REFUSED:
            if not (name == "sla" and value is None):
                refuse(f"{name}={value!r}", REFUSED[name], dag_id=dag.dag_id, task_id=task_id)
        else:
            raise DagDefinitionError(
                f"task {task_id!r}: unknown argument {name!r}",
                dag_id=dag.dag_id,
                task_id=task_id,
            )
    return out


def _bash_command(dag: DAG, command: object, task_id: str) -> str:
    """The command, or the text of the template file it names (Airflow's ``.sh`` files)."""
    if not isinstance(command, str) or not command.strip().endswith((".sh", ".bash")):
        return command  # type: ignore[return-value]  # BashTask names a bad type
    name = command.strip()
    if " " in name:  # a command line that runs a script: Airflow renders only a file name
        return command
    folders = [*getattr(dag, "template_searchpath", ()), str(Path(dag.fileloc).parent)]
    for folder in folders:
        path = Path(folder, name)
        if path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    raise DagDefinitionError(
        f"bash_command {name!r} of task {task_id!r} names a template file that is in none of"
        f" {folders} (template_searchpath, then the DAG file's folder)",
        dag_id=dag.dag_id,
        task_id=task_id,
    )


class BashOperator(BashTask):
    """``BashOperator(task_id=, bash_command=, env=, append_env=, cwd=, skip_on_exit_code=)``."""

    template_fields = ("bash_command", "env", "cwd")
    # .partial(task_id=...).expand(bash_command=[...]): each instance gets its own command
    mapped_stand_ins = {"bash_command": "# mapped: each instance gets its own command"}
    mappable = ("bash_command", "env")

    def __init__(
        self,
        *,
        task_id: str,
        bash_command: str,
        env: dict[str, str] | None = None,
        append_env: bool = False,  # the worker's allow-listed env is always under env
        cwd: str | None = None,
        skip_on_exit_code: int | list[int] | None = 99,
        output_encoding: str = "utf-8",
        dag: DAG | None = None,
        **kwargs: Any,
    ) -> None:
        del append_env, output_encoding
        owner = current_dag(dag)
        full_id = task_groups.qualify(task_id)
        command = _bash_command(owner, bash_command, full_id)
        if cwd is not None and isinstance(command, str):
            command = f"cd -- {shlex.quote(os.fspath(cwd))} || exit 1\n{command}"
        codes = [skip_on_exit_code] if isinstance(skip_on_exit_code, int) else skip_on_exit_code
        if codes is not None and len(list(codes)) > 1:
            refuse(
                f"skip_on_exit_code={skip_on_exit_code!r}",
                "give one exit code",
                dag_id=owner.dag_id,
                task_id=full_id,
            )
        skip = next(iter(codes), None) if codes is not None else None
        options = declare_template_variables(task_options(owner, full_id, kwargs), command, env)
        super().__init__(
            task_id, command=command, env=env, skip_on_exit_code=skip, dag=owner, **options
        )
        self.bash_command = bash_command


class _PythonBase(TaskFlowTask):
    mode = _callables.PYTHON

    def __init__(
        self,
        *,
        task_id: str,
        python_callable: Callable[..., Any],
        op_args: list[Any] | tuple[Any, ...] | None = None,
        op_kwargs: dict[str, Any] | None = None,
        templates_dict: dict[str, Any] | None = None,
        templates_exts: Any = None,
        show_return_value_in_logs: bool = True,
        dag: DAG | None = None,
        **kwargs: Any,
    ) -> None:
        del templates_exts, show_return_value_in_logs
        owner = current_dag(dag)
        full_id = task_groups.qualify(task_id)
        if not callable(python_callable):
            raise DagDefinitionError(
                f"python_callable of task {full_id!r} must be callable, got"
                f" {type(python_callable).__name__}",
                dag_id=owner.dag_id,
                task_id=full_id,
            )
        ignore = kwargs.pop("ignore_downstream_trigger_rules", True)
        del ignore  # skips go on by trigger rules here (the migration guide says so)
        options = task_options(owner, full_id, kwargs)
        arguments: dict[str, Any] = {"op_args": list(op_args or []), "op_kwargs": op_kwargs or {}}
        if templates_dict is not None:
            arguments["templates_dict"] = templates_dict
        declare_template_variables(options, arguments)
        super().__init__(task_id, dag=owner, kwargs=arguments, **options)
        self.python_callable = python_callable
        _callables.register(self, python_callable, mode=self.mode, classic=True)


class PythonOperator(_PythonBase):
    """``PythonOperator(task_id=, python_callable=, op_args=, op_kwargs=, templates_dict=)``."""


class BranchPythonOperator(_PythonBase):
    """Its callable returns the task id(s) to follow among its direct downstream tasks."""

    mode = _callables.BRANCH


class ShortCircuitOperator(_PythonBase):
    """A falsy return value skips its downstream tasks (skips go on by trigger rule)."""

    mode = _callables.SHORT_CIRCUIT


class EmptyOperator(EmptyTask):
    """Does nothing: the scheduler finishes it when its trigger rule is met (no worker)."""

    def __init__(self, *, task_id: str, dag: DAG | None = None, **kwargs: Any) -> None:
        owner = current_dag(dag)
        options = task_options(owner, task_groups.qualify(task_id), kwargs)
        options.pop("secrets", None)  # it reads nothing
        options.pop("connections", None)
        super().__init__(task_id, dag=owner, **options)


DummyOperator = EmptyOperator  # Airflow 1/2's name


__all__ = [
    "BashOperator",
    "BranchPythonOperator",
    "DummyOperator",
    "EmptyOperator",
    "PythonOperator",
    "ShortCircuitOperator",
    "declare_template_variables",
    "task_options",
    "template_variables",
]
