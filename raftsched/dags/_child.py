"""The child process that imports one DAG file:
``python -m raftsched.dags._child FD TIMEOUT FILE [CATCHUP_DEFAULT]``.

It imports FILE (its directory first on sys.path, like Airflow), collects every DAG built
while importing (a DAG without ``catchup=`` gets CATCHUP_DEFAULT, ``1`` or ``0``, default 0:
``[scheduler] catchup_by_default``), and writes one JSON object to file descriptor FD:
``{"specs": [DagSpec dicts]}`` or ``{"error": {"message": one line, "traceback": text}}``.
Whatever the file prints goes to this process's stdout/stderr, which the parent caps. At the
parent's timeout it sends SIGUSR1 and faulthandler dumps the stacks to stderr, so a hang shows
where (a timer of the child's own missed it when the child itself started slowly).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import traceback
from typing import Any

from raftsched.dags import loading
from raftsched.dags.authoring import DAG, PythonTask, collect_dags, set_catchup_default
from raftsched.dags.validation import resolve_callable
from raftsched.errors import DagDefinitionError

DUMP_SIGNAL = signal.SIGUSR1  # raftsched.dags.parser sends it at the timeout: keep them equal


def load(path: str) -> list[dict[str, Any]]:
    """Import the DAG file at ``path`` and return its DAG specs as dicts."""
    with collect_dags() as dags:
        module = loading.load_dag_module(path)
    if module is None:
        raise ImportError(f"cannot import {path}")
    return [spec.to_dict() for spec in specs_of(dags, vars(module), path)]


def specs_of(dags: list[DAG], namespace: dict[str, Any], fileloc: str) -> list[Any]:
    specs = []
    seen: set[str] = set()
    for dag in dags:
        if dag.dag_id in seen:
            raise DagDefinitionError(
                f"dag_id {dag.dag_id!r} is defined twice in this file", dag_id=dag.dag_id
            )
        seen.add(dag.dag_id)
        for task in dag.tasks.values():
            if isinstance(task, PythonTask):
                found = resolve_callable(namespace, task.callable_name)
                if found is not task.fn:
                    raise DagDefinitionError(
                        f"fn of PythonTask {task.task_id!r} in DAG {dag.dag_id!r}:"
                        f" {task.callable_name!r} is not a module-level name of the DAG file;"
                        " workers look it up there, so define or import it under that name",
                        dag_id=dag.dag_id,
                        task_id=task.task_id,
                    )
        specs.append(dag.to_spec(fileloc=fileloc))
    return specs


def one_line(err: BaseException) -> str:
    if isinstance(err, DagDefinitionError):
        text = str(err)
    elif isinstance(err, SyntaxError):
        text = f"SyntaxError: {err.msg} (line {err.lineno})"
    else:
        first = str(err).strip().splitlines()
        text = f"{type(err).__name__}: {first[0]}" if first else type(err).__name__
    return text[:500]


def format_traceback(err: BaseException) -> str:
    """The traceback without the frames of this module, ``loading`` and importlib's machinery."""
    ours = {__file__, loading.__file__}
    exc = traceback.TracebackException.from_exception(err)
    exc.stack = traceback.StackSummary.from_list(
        [f for f in exc.stack if f.filename not in ours and "importlib" not in f.filename]
    )
    return "".join(exc.format())


def main(argv: list[str]) -> int:
    fd, timeout, path = int(argv[0]), float(argv[1]), argv[2]
    set_catchup_default(argv[3:4] == ["1"])
    if os.environ.get("RAFTSCHED_CREATE_CRON_DATA_INTERVALS") == "1":  # parser.configure_airflow
        from raftsched.airflow._dag import set_create_cron_data_intervals

        set_create_cron_data_intervals(True)
    del timeout  # the parent keeps the time; it asks for the stacks with DUMP_SIGNAL
    faulthandler.register(DUMP_SIGNAL, all_threads=True)
    try:
        result: dict[str, Any] = {"specs": load(path)}
    except BaseException as err:
        result = {"error": {"message": one_line(err), "traceback": format_traceback(err)}}
    faulthandler.unregister(DUMP_SIGNAL)
    data = json.dumps(result).encode()
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
