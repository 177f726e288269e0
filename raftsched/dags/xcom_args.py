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
import stat
import sys
from collections.abc import Mapping
from typing import Any

from raftsched.core.xcom import MAX_XCOM_BYTES, XCOM_HINT, check_result_json
from raftsched.errors import XComError

PLACEHOLDER = "__raftsched_xcom__"
RESULT_FILE_ENV = "RAFTSCHED_RESULT_FILE"
RESULT_FILE_NAME = "raftsched-result.json"
# The result file holds one return value plus a branch's ids: bound what the worker reads
MAX_RESULT_FILE_BYTES = 2 * MAX_XCOM_BYTES + 4 * 1024 * 1024


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


def write_result(
    return_json: str,
    follow: list[str] | None = None,
    skipped: bool = False,
    defer: dict[str, Any] | None = None,
    outlet_extras: Mapping[str, str] | None = None,
) -> None:
    """Write the attempt's outcome where the worker looks (no file name: not under a worker).
    ``defer``: the attempt deferred (``dags.deferral.TaskDeferred.to_dict``);
    ``outlet_extras``: asset URI -> the extra (JSON object text) its event carries."""
    path = os.environ.get(RESULT_FILE_ENV)
    if not path:
        return
    data: dict[str, Any] = {
        "return_value_json": return_json,
        "follow": follow,
        "skipped": bool(skipped),
    }
    if defer is not None:
        data["defer"] = defer
    if outlet_extras:
        data["outlet_extras"] = dict(outlet_extras)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out)


def read_result(path: str) -> tuple[str, tuple[str, ...] | None, bool]:
    """(return value JSON text, follow, skipped) from a result file; ("", None, False) when
    there is none. Raises XComError for a file that is not a regular file, past its bound or
    not in the format.

    The worker reads what a task made, in its own process: nothing here may follow a link
    (to ``/dev/zero``: an endless read), block (on a FIFO no one will ever write) or read past
    the bound (a huge sparse file), whatever stands at ``path`` (:func:`read_bounded`)."""
    try:
        data = read_bounded(path, MAX_RESULT_FILE_BYTES)
    except FileNotFoundError:
        return "", None, False
    try:
        loaded = json.loads(data.decode("utf-8"))
        text = loaded.get("return_value_json") or ""
        follow = loaded.get("follow")
        skipped = bool(loaded.get("skipped", False))
        if not isinstance(text, str):
            raise TypeError("return_value_json is not a string")
        if follow is not None:
            if not isinstance(follow, list) or not all(isinstance(t, str) for t in follow):
                raise TypeError("follow is not a list of task ids")
            follow = tuple(follow)
    except (ValueError, TypeError, AttributeError, RecursionError) as err:
        raise XComError(f"the result file is unreadable: {str(err)[:200]}") from None
    try:
        check_result_json("return value", text)
    except ValueError as err:
        raise XComError(f"{err}; {XCOM_HINT}") from None
    return text, follow, skipped


def read_deferral(path: str) -> dict[str, Any] | None:
    """The deferral a result file holds (its fields as ``TaskDeferred.to_dict`` wrote them,
    types checked; the cluster bounds them), or None."""
    try:
        loaded = json.loads(read_bounded(path, MAX_RESULT_FILE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as err:
        raise XComError(f"the result file is unreadable: {str(err)[:200]}") from None
    defer = loaded.get("defer") if isinstance(loaded, dict) else None
    if defer is None:
        return None
    texts = ("kind", "args_json", "method_name", "kwargs_json")
    timeout = defer.get("timeout_seconds") if isinstance(defer, dict) else None
    if (
        not isinstance(defer, dict)
        or not all(isinstance(defer.get(name), str) for name in texts)
        or not (timeout is None or isinstance(timeout, int | float))
    ):
        raise XComError("the result file's deferral is not in the format")
    return {name: defer[name] for name in texts} | {"timeout_seconds": timeout}


def read_outlet_extras(path: str) -> tuple[tuple[str, str], ...]:
    """The outlet extras a result file holds, as ``CompleteAttempt.outlet_extras`` takes them
    ((URI, JSON object text) pairs, sorted), checked against the core's bounds; () for none.
    Raises XComError for extras not in the format or past a bound."""
    from raftsched.core.asset_condition import check_outlet_extras
    from raftsched.errors import LimitExceeded

    try:
        loaded = json.loads(read_bounded(path, MAX_RESULT_FILE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return ()
    except (ValueError, RecursionError) as err:
        raise XComError(f"the result file is unreadable: {str(err)[:200]}") from None
    extras = loaded.get("outlet_extras") if isinstance(loaded, dict) else None
    if not extras:
        return ()
    if not isinstance(extras, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in extras.items()
    ):
        raise XComError("the result file's outlet extras are not in the format")
    try:
        return check_outlet_extras("outlet extras", tuple(sorted(extras.items())))
    except LimitExceeded as err:
        raise XComError(f"{err}") from None


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_LEAVE_ALONE = (
    f"raftsched writes {RESULT_FILE_NAME} when the task returns; a task must not replace it"
    " or its working directory"
)


def read_bounded(path: str, bound: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``bound``; XComError when it is
    anything else (a link, even to a regular file; a directory, FIFO, socket or device) or
    longer, FileNotFoundError when there is none. Never follows a link, never blocks: the
    file is opened O_NOFOLLOW|O_NONBLOCK (a FIFO opens at once and is refused by its
    ``fstat``), and at most ``bound`` + 1 bytes are read whatever the size says."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    folder, name = os.path.split(path)
    try:  # the folder too: a task may have put a link in place of its working directory
        dir_fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise _unopenable(err, folder) from None
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as err:
        raise _unopenable(err, name, dir_fd) from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise XComError(_not_regular(_kind(info.st_mode)))
        if info.st_size > bound:
            raise XComError(_too_large(info.st_size, bound))
        chunks: list[bytes] = []
        got = 0
        while got <= bound:  # it may grow while it is read: the bound holds, not the size
            chunk = os.read(fd, min(1 << 20, bound + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > bound:
            raise XComError(_too_large(got, bound, at_least=True))
        return b"".join(chunks)
    except OSError as err:
        raise XComError(f"the result file cannot be read: {err.strerror}") from None
    finally:
        os.close(fd)


def _unopenable(err: OSError, name: str, dir_fd: int | None = None) -> OSError:
    """What to raise when ``name`` (the file in ``dir_fd``, else its folder) did not open."""
    if isinstance(err, FileNotFoundError):
        return err
    what = "the result file" if dir_fd is not None else "the attempt's working directory"
    try:  # only to name what stands there: the open above decided
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return XComError(f"{what} cannot be opened: {err.strerror}")
    expected = (
        (stat.S_ISREG, "a regular file") if dir_fd is not None else (stat.S_ISDIR, "a directory")
    )
    if not expected[0](mode):
        return XComError(f"{what} is not {expected[1]} (it is {_kind(mode)}): {_LEAVE_ALONE}")
    return XComError(f"{what} cannot be opened: {err.strerror}")


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a file")


def _not_regular(kind: str) -> str:
    return f"the result file is not a regular file (it is {kind}): {_LEAVE_ALONE}"


def _too_large(size: int, bound: int, at_least: bool = False) -> str:
    return (
        f"the result file is too large: {'more than ' if at_least else ''}"
        f"{bound if at_least else size} bytes, {bound} bytes max; {XCOM_HINT}"
    )


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
