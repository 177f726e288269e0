"""A Python fork server of the task supervisor (``supervisor.py``): a fork of it that imports one
DAG file once (:func:`_forkserver_main`), the stamps by which the worker retires it when that
file or a helper beside it changes (``supervisor_wire.file_stamp``, :func:`_dependencies`), and
the warm task process forked from its memory (:func:`_fork_python`, :func:`_run_warm`).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sys
import tempfile
import traceback
from typing import Any

from raftsched.worker import _guard
from raftsched.worker.supervisor_wire import _close_all_but, file_stamp, send

FORKSERVER_IMPORT_SECONDS = 60  # SIGALRM (default action) ends a fork server stuck importing


def _forkserver_main(supervisor: int, path: str, fd: int) -> None:
    signal.set_wakeup_fd(-1)
    _close_all_but(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # what the DAG file prints while imported goes nowhere
        os.dup2(devnull, target)
    os.close(devnull)
    _guard._prctl(_guard.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor:
        os._exit(0)
    os.chdir(tempfile.gettempdir())
    sock = socket.socket(fileno=fd)
    # here, not at the top: supervisor_server imports this module (it starts fork servers)
    from raftsched.worker.supervisor_server import Server

    server = Server(sock, supervisor, forkserver=True)
    stamp = file_stamp(path)
    try:
        from raftsched.worker._run_python import import_dag_file

        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(FORKSERVER_IMPORT_SECONDS)
        server.module = import_dag_file(path)
        signal.alarm(0)
    except BaseException as err:
        send(sock, {"op": "failed", "message": f"{type(err).__name__}: {err}"})
        os._exit(0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    send(sock, {"op": "ready", "stamp": stamp, "deps": _dependencies(path)})
    server.serve()


def _dependencies(path: str, limit: int = 500) -> list[list[Any]]:
    """[file, stamp] of each module the DAG file imported from its own folder (its helpers):
    an edit to one of them must retire this fork server too, as an edit to the file does."""
    folder = os.path.dirname(os.path.abspath(path)) + os.sep
    deps = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        file = os.path.abspath(file)
        if file.startswith(folder) and file != os.path.abspath(path):
            deps.append([file, file_stamp(file)])
            if len(deps) >= limit:
                break
    return deps


def _fork_python(module: Any, spec: dict[str, Any], env: dict[str, str]) -> int:
    """In a guard: fork the PythonTask from the warm fork server's memory."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _run_warm(module, spec, env)
        except BaseException:
            with contextlib.suppress(BaseException):
                os.write(2, traceback.format_exc().encode())
        os._exit(code)
    return pid


def _run_warm(module: Any, spec: dict[str, Any], env: dict[str, str]) -> int:
    """The task process of a warm PythonTask: as ``_run_python`` would run it in a new
    interpreter, with the DAG module already imported; as ``[worker] run_as_user`` before
    anything of the task runs (``_guard.drop_privileges``)."""
    from raftsched.worker import _run_python  # imported already: the user may not read it

    _guard.drop_privileges(spec.get("user"))
    for signum in _guard.WATCHED | _guard.RESET | {signal.SIGALRM}:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it at start
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's stdin until it exits
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), "utf-8", "backslashreplace", write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace", write_through=True
    )
    sys.argv = [str(spec["fileloc"])]
    code = _run_python.call(
        module, str(spec["fileloc"]), str(spec["callable"]), spec.get("kwargs") or {}
    )
    return _run_python.finish(code)
