"""XCom on the task side: argument placeholders, and the attempt's result file.

- A TaskFlow task called with another task's output (``load(extract())``) gets, in its spec's
  kwargs, a placeholder ``{"__raftsched_xcom__": "extract", "path": [...]}`` where the value
  belongs. The worker replaces each placeholder (:func:`resolve`) with the upstream's return
  value, which its lease carries (``TaskLease.upstream_results``), after the templates are
  rendered (a return value is never rendered as a template).
- A Python attempt writes its outcome to the file named by :data:`RESULT_FILE_ENV` in its
  working directory (:func:`write_result`): ``{"return_value": <json>, "follow": [ids] or
  null, "skipped": bool}``. The worker reads and bounds it (:func:`read_result`) and sends it
  with the outcome (``CompleteAttempt.result_json``/``follow``/``skipped``).

A TaskFlow task's return value must be JSON-serializable and at most
``core.xcom.MAX_XCOM_BYTES``; past that the attempt fails with a message saying so. A classic
``PythonTask`` keeps a return value that fits and warns on stderr about one that does not
(so existing DAGs that return, say, a DataFrame keep working).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from raftsched.core.xcom import MAX_XCOM_BYTES, XCOM_HINT, check_result_json

PLACEHOLDER = "__raftsched_xcom__"
RESULT_FILE_ENV = "RAFTSCHED_RESULT_FILE"
RESULT_FILE_NAME = "raftsched-result.json"
# The result file holds one return value plus a branch's ids: bound what the worker reads
MAX_RESULT_FILE_BYTES = 2 * MAX_XCOM_BYTES + 4 * 1024 * 1024


class XComError(Exception):
    """A return value that cannot be kept, or an argument that cannot be resolved."""


class TaskSkipped(Exception):  # Airflow: AirflowSkipException
    """Raise it in a Python task to end the attempt SKIPPED (downstream: per trigger rules)."""


def placeholder(task_id: str, path: tuple[str | int, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {PLACEHOLDER: task_id}
    if path:
        out["path"] = list(path)
    return out


def resolve(value: Any, upstream_results: Mapping[str, str]) -> Any:
    """``value`` with every placeholder replaced by the upstream return value it names (None
    when that task returned nothing). Raises XComError for a path that is not there."""
    if isinstance(value, dict):
        if PLACEHOLDER in value and set(value) <= {PLACEHOLDER, "path"}:
            return _lookup(value, upstream_results)
        return {k: resolve(v, upstream_results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, upstream_results) for v in value]
    return value


def _lookup(ref: dict[str, Any], upstream_results: Mapping[str, str]) -> Any:
    task_id = str(ref[PLACEHOLDER])
    text = upstream_results.get(task_id)
    result = None if text is None else json.loads(text)
    for step in ref.get("path") or ():
        try:
            result = result[step]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            raise XComError(
                f"the return value of {task_id!r} has no item {step!r} (it is {_short(result)})"
            ) from None
    return result


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


def encode_return_value(value: Any, *, strict: bool) -> str:
    """The return value as compact JSON text ("" for None). ``strict`` (TaskFlow): raise
    XComError past a bound; else warn on stderr and keep nothing."""
    if value is None:
        return ""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as err:
        message = (
            f"the return value is not JSON-serializable ({err}); XCom values are JSON of at"
            f" most {MAX_XCOM_BYTES} bytes: {XCOM_HINT}"
        )
    else:
        try:
            return check_result_json("the return value", text)
        except ValueError as err:  # LimitExceeded: size, depth, unclean text
            message = str(err)
    if strict:
        raise XComError(message)
    print(f"raftsched: warning: {message}; it is not kept", file=sys.stderr)
    return ""


def write_result(return_json: str, follow: list[str] | None = None, skipped: bool = False) -> None:
    """Write the attempt's outcome where the worker looks (no file name: not under a worker)."""
    path = os.environ.get(RESULT_FILE_ENV)
    if not path:
        return
    data = {
        "return_value_json": return_json,
        "follow": follow,
        "skipped": bool(skipped),
    }
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out)


def read_result(path: str) -> tuple[str, tuple[str, ...] | None, bool]:
    """(return value JSON text, follow, skipped) from a result file; ("", None, False) when
    there is none. Raises XComError for a file past its bound or not in the format."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return "", None, False
    if size > MAX_RESULT_FILE_BYTES:
        raise XComError(f"the result file is {size} bytes; the limit is {MAX_RESULT_FILE_BYTES}")
    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
        text = data.get("return_value_json") or ""
        follow = data.get("follow")
        skipped = bool(data.get("skipped", False))
        if not isinstance(text, str):
            raise TypeError("return_value_json is not a string")
        if follow is not None:
            if not isinstance(follow, list) or not all(isinstance(t, str) for t in follow):
                raise TypeError("follow is not a list of task ids")
            follow = tuple(follow)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as err:
        raise XComError(f"the result file is unreadable: {err}") from None
    try:
        check_result_json("return value", text)
    except ValueError as err:
        raise XComError(f"{err}; {XCOM_HINT}") from None
    return text, follow, skipped


def branch_follow(value: Any) -> list[str]:
    """What a ``@task.branch`` returned, as the list of task ids to follow."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple | set | frozenset) and all(isinstance(v, str) for v in value):
        return sorted(set(value))
    raise XComError(
        f"a branch must return a task id or a list of task ids, got {type(value).__name__}"
    )
