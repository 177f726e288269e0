"""A callback's process: the callable of a callback job called with its context dict.

Runs inside the Python-attempt path (``_run_python.call`` hands over when the kwargs carry
:data:`CALLBACK_KEY`): in a fork of the DAG file's warm process, or cold. The callable is a
module-level name of the DAG file (called as ``fn(context)``, Airflow's signature) or a
built-in notifier (``raftsched.notifiers``), run with its settings. The exit code says how
it went: 0 when it returned, 1 after a traceback on stderr (its last line becomes the job's
message).
"""

from __future__ import annotations

import base64
import json
import sys
import traceback
from types import ModuleType
from typing import Any

CALLBACK_KEY = "__raftsched_callback__"  # kwargs {CALLBACK_KEY: encode_payload(...)}


def encode_payload(context: dict[str, Any], settings: dict[str, Any]) -> str:
    """The context and a notifier's settings as one opaque text (base64 of JSON): the
    Python-attempt path renders templates in kwargs and resolves XCom placeholders, and a
    callback's context (a task's message, a run's conf) must reach it untouched."""
    text = json.dumps({"context": context, "settings": settings})
    return base64.b64encode(text.encode()).decode()


def call_callback(module: ModuleType | None, path: str, ref: str, payload: Any) -> int:
    from raftsched.core.callbacks import NOTIFIER_PREFIX

    if isinstance(payload, str):
        try:
            payload = json.loads(base64.b64decode(payload))
        except ValueError:
            payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("context"), dict):
        print("raftsched: a callback needs a context dict", file=sys.stderr)
        return 1
    context: dict[str, Any] = payload["context"]
    settings = payload.get("settings") or {}
    try:
        if ref.startswith(NOTIFIER_PREFIX):
            from raftsched.notifiers import run_notifier

            run_notifier(ref, context, settings)
            return 0
        from raftsched.dags.validation import resolve_callable
        from raftsched.errors import TaskLoadError
        from raftsched.worker._run_python import import_dag_file

        try:
            namespace = vars(module) if module is not None else vars(import_dag_file(path))
        except TaskLoadError as err:
            print(f"raftsched: {err}", file=sys.stderr)
            return 1
        fn = resolve_callable(namespace, ref)
        if fn is None:
            print(
                f"raftsched: {ref!r} is not a callable module-level name of {path}", file=sys.stderr
            )
            return 1
        if getattr(fn, "raftsched_airflow_context", False):  # marked by raftsched.airflow
            from raftsched.airflow._context import callback_context

            context = callback_context(context)
        fn(context)
    except SystemExit as exit_:
        return 0 if exit_.code in (None, 0) else 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
