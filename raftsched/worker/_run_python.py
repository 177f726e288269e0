"""A PythonTask's process: ``python -m raftsched.worker._run_python FILE CALLABLE``.

Reads the kwargs (a JSON object) from stdin, imports the DAG file FILE (its directory first on
sys.path, as the parser does), looks CALLABLE ("fn" or "Class.fn") up among its module-level
names and calls it with the kwargs. Exit 0 when it returns; when it raises, the traceback goes
to stderr and the exit code is 1, so its last line ("ValueError: ...") becomes the attempt's
failure message. DAGs the file builds while importing are collected and discarded.

This is the cold path (a new interpreter per attempt), used when no fork server has the DAG
file imported (see ``supervisor.py``); a warm attempt runs :func:`call` in a fork.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from raftsched import taskenv
from raftsched.dags import deferral, xcom_args
from raftsched.dags.assets import outlet_extras_json
from raftsched.dags.authoring import collect_dags
from raftsched.dags.loading import load_dag_module
from raftsched.dags.validation import resolve_callable
from raftsched.errors import TaskLoadError, TaskSkipped, XComError
from raftsched.worker import _run_callback


def import_dag_file(path: str) -> ModuleType:
    if not Path(path).is_file():
        raise TaskLoadError(
            f"DAG file {path} not found on this worker; workers need the same DAG files, at"
            " the same paths, as the scheduler"
        )
    with collect_dags():
        module = load_dag_module(path)
    if module is None:
        raise TaskLoadError(f"cannot import DAG file {path}")
    return module


def load_callable(path: str, callable_name: str) -> Any:
    module = import_dag_file(path)
    fn = resolve_callable(vars(module), callable_name)
    if fn is None:
        raise TaskLoadError(f"{callable_name!r} is not a callable module-level name of {path}")
    return fn


def read_kwargs(text: str) -> dict[str, Any]:
    kwargs = json.loads(text or "{}")
    if not isinstance(kwargs, dict):
        raise TaskLoadError(f"kwargs must be a JSON object, got {type(kwargs).__name__}")
    return kwargs


def call(module: ModuleType | None, path: str, callable_name: str, kwargs: Any) -> int:
    """Look the function up (importing the DAG file unless ``module`` is given), call it and
    return the exit code the attempt ends with: 0, 1 after a traceback on stderr, or what a
    ``SystemExit`` says (as the interpreter would exit with it)."""
    if isinstance(kwargs, dict) and _run_callback.CALLBACK_KEY in kwargs:  # a callback job
        return _run_callback.call_callback(
            module, path, callable_name, kwargs[_run_callback.CALLBACK_KEY]
        )
    resume = kwargs.pop(deferral.RESUME_KEY, None) if isinstance(kwargs, dict) else None
    try:
        namespace = vars(module) if module is not None else vars(import_dag_file(path))
        if isinstance(resume, dict):  # its trigger fired: the method it named takes over
            callable_name = str(resume.get("method") or "")
            kwargs = {**(resume.get("kwargs") or {}), "event": resume.get("event")}
        fn = resolve_callable(namespace, callable_name)
        if fn is None:
            raise TaskLoadError(f"{callable_name!r} is not a callable module-level name of {path}")
        if not isinstance(kwargs, dict):
            raise TaskLoadError(f"kwargs must be a JSON object, got {type(kwargs).__name__}")
    except TaskLoadError as err:
        print(f"raftsched: {err}", file=sys.stderr)
        return 1
    try:
        value = fn(**kwargs)
    except SystemExit as exit_:
        return _exit_code(exit_)
    except deferral.TaskDeferred as deferred:
        try:
            xcom_args.write_result("", None, defer=deferred.to_dict())
        except (TypeError, ValueError, OSError) as err:
            print(f"raftsched: cannot defer: {err}", file=sys.stderr)
            return 1
        print(f"raftsched: {deferred}", file=sys.stderr)
        return 0
    except TaskSkipped as skip:
        print(f"raftsched: skipped{': ' if str(skip) else ''}{skip}", file=sys.stderr)
        xcom_args.write_result("", None, skipped=True)
        return 0
    except BaseException:
        traceback.print_exc()
        return 1
    return _keep_result(fn, value)


def _keep_result(fn: Any, value: Any) -> int:
    """Write the return value (and a branch's choice) to the result file (xcom_args): exit
    code 0, or 1 when a TaskFlow task's value is past a bound (its message on stderr)."""
    taskflow = bool(getattr(fn, "raftsched_taskflow", False))  # a dags.taskflow.TaskCallable
    try:
        follow = xcom_args.branch_follow(value) if getattr(fn, "branch", False) else None
        text = xcom_args.encode_return_value(value, strict=taskflow)
        xcom_args.write_result(text, follow, outlet_extras=outlet_extras_json())
    except XComError as err:
        print(f"raftsched: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"raftsched: cannot write the return value: {err}", file=sys.stderr)
        return 1
    return 0


def _exit_code(exit_: SystemExit) -> int:
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(code: int) -> int:
    """What the interpreter does before it exits: wait for non-daemon threads, run atexit
    handlers, flush stdout/stderr. For a task process that leaves with ``os._exit``."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m raftsched.worker._run_python FILE CALLABLE", file=sys.stderr)
        return 2
    path, callable_name = argv
    # Our environment holds this attempt's declared secrets: another task of the same user
    # must not read them (or our memory) from /proc, as it cannot a warm task's.
    taskenv.protect_this_process()
    kwargs_text = sys.stdin.read()
    devnull = os.open(os.devnull, os.O_RDONLY)  # the task itself reads nothing
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        kwargs = read_kwargs(kwargs_text)
    except (TaskLoadError, ValueError) as err:
        print(f"raftsched: {err}", file=sys.stderr)
        return 1
    return call(None, path, callable_name, kwargs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
