"""The environment hostile code starts from: task processes and DAG-parse children.

Neither inherits the worker's or the scheduler's environment whole: only the names the
allow-list lets through (``[worker] task_env_allowlist``, :data:`DEFAULT_ALLOWLIST` by default),
then what the task adds (its ``env``, its ``RAFTSCHED_*`` variables). So the worker token, the
cluster secret, the database URL and every other ``RAFTSCHED__SECTION__KEY`` setting, and
``RAFTSCHED_TOKEN``/``RAFTSCHED_CONFIG`` (which may point at a file of secrets), stay out.

An entry is a variable name or an ``fnmatch`` pattern (``LC_*``). A pattern never lets through
a name that starts with ``RAFTSCHED``: such a variable passes only when listed by its exact
name, so ``*`` cannot leak a secret by accident.

A task runs as the worker's user (unless ``[worker] run_as_user``: ``worker/task_user.py``),
so it could read the worker's own environment from ``/proc/WORKER_PID/environ``:
:func:`protect_this_process` (the worker calls it before its first attempt, its task
supervisor and death reporter first thing after their exec, a cold PythonTask before it
reads its kwargs, a scheduler node before its first DAG-parse child) makes the process
non-dumpable, which leaves its ``/proc`` files (environ, mem, fds) to root and stops
same-user ptrace; a fork inherits that, an exec does not. What it cannot hide: the command
line (``/proc/PID/cmdline`` is world-readable: pass the token in the environment or the
config, not ``--token``) and files the user can read (the config file).
"""

from __future__ import annotations

import ctypes
import fnmatch
import functools
import os
import sys
from collections.abc import Iterable, Mapping

DEFAULT_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
)

_allowlist: tuple[str, ...] = DEFAULT_ALLOWLIST


def configure(allowlist: Iterable[str] | None) -> None:
    """Set this process's allow-list (the worker calls it with its config's); None: default."""
    global _allowlist
    _allowlist = DEFAULT_ALLOWLIST if allowlist is None else tuple(allowlist)


def allowlist() -> tuple[str, ...]:
    return _allowlist


def allowed(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if name == pattern:
            return True
        if not name.upper().startswith("RAFTSCHED") and fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def scrubbed(
    env: Mapping[str, str] | None = None, patterns: Iterable[str] | None = None
) -> dict[str, str]:
    """The allowed part of ``env`` (default: this process's environment)."""
    names = tuple(_allowlist if patterns is None else patterns)
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if _allowed(k, names)}


@functools.lru_cache(maxsize=4096)
def _allowed(name: str, patterns: tuple[str, ...]) -> bool:
    """``allowed``, remembered: every attempt scrubs the same environment, so the
    patterns need not be matched again for every variable of every attempt."""
    return allowed(name, patterns)


PR_SET_DUMPABLE = 4


_protected: int | None = None  # the PID this process protected itself as


def protect_this_process() -> bool:
    """Make this process non-dumpable (Linux): its /proc files become root's, so a task or a
    DAG file's code of the same user cannot read its environment or memory. Once per process;
    False when that is not possible."""
    global _protected
    if _protected == os.getpid():
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_DUMPABLE, ctypes.c_ulong(0), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok:
        _protected = os.getpid()
    return ok
