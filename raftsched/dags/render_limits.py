"""A task's templates render in a helper process with a memory limit and a deadline: defence
in depth behind the sandbox's own bounds (:mod:`raftsched.dags.sandbox`).

The worker renders before every attempt, the webserver on every task page, ``tasks render``
on every call, each from a template whoever wrote the DAG file chose, with the conf whoever
triggered the run chose. Should a template find a way around the sandbox's bounds, it must
cost one failed render, never the webserver's or the worker's memory or threads.

So each process that renders keeps up to MAX_HELPERS helpers (``python -m
raftsched.dags.render_helper``, started on demand, each a fresh interpreter: no gRPC threads,
no locks of ours, nothing of the caller's memory), each limiting its own address space
(RLIMIT_AS) to what it needs plus RENDER_MEMORY_BYTES. :func:`run_limited` sends a free helper
one job (a render takes well under a millisecond once its template is compiled) and waits at
most RENDER_WALL_SECONDS for the answer. A helper that runs out of time is killed, one that ran
out of memory exits; either is a :class:`RenderLimitExceeded` saying so, and the next render
starts a new helper. A helper that cannot start (no processes left, no READY within
START_SECONDS) leaves the render to the calling process, bounded by the sandbox alone, with a
warning.

Why not fork per render: the caller's gRPC threads (fork handlers, locks held mid-call) make
a forked child of the webserver or the worker unsafe, and a fork of a webserver-sized process
cost 12-68 ms a render on a loaded 2-core machine, a render through a helper 0.2 ms
(scripts/bench/render.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from raftsched.dags.render_helper import EXIT_OUT_OF_MEMORY, perform
from raftsched.dags.template_sizes import RENDER_SECONDS
from raftsched.errors import RenderLimitExceeded

log = logging.getLogger(__name__)

RENDER_MEMORY_BYTES = 512 * 1024 * 1024  # address space a render may use beyond the helper's own
RENDER_WALL_SECONDS = RENDER_SECONDS + 5.0  # the sandbox stops at RENDER_SECONDS by itself
MAX_HELPERS = 4  # renders at once in one process; more wait for a free helper
START_SECONDS = 60.0  # a helper's interpreter starting on a loaded machine
MAX_ANSWER_BYTES = 512 * 1024 * 1024  # the pickled answer (1 MB per rendered value)
_HEADER = struct.Struct(">Q")
READY = b"R"
HELPER_MODULE = "raftsched.dags.render_helper"
_ENV_KEPT = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")


def _helper_env() -> dict[str, str]:
    """Nothing of the caller's secrets (the helper needs an interpreter, not a token), and the
    caller's import path, so that it renders with the very modules the caller has."""
    env = {k: os.environ[k] for k in _ENV_KEPT if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


class _Helper:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", HELPER_MODULE, str(RENDER_MEMORY_BYTES)]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_helper_env(),
            close_fds=True,
            start_new_session=True,  # a Ctrl-C or a signal to the caller's group is not its
        )
        self.proc = proc
        assert proc.stdout is not None
        try:  # it says READY once it imported everything and limited itself
            ready = self._read(proc.stdout.fileno(), len(READY), time.monotonic() + START_SECONDS)
        except (TimeoutError, EOFError):
            ready = b""
        if ready != READY:
            status = self._stop()
            raise OSError(f"the render helper did not start (exit status {status})")
        return proc

    def _stop(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        return proc.wait()

    def _read(self, fd: int, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def call(self, job: Any) -> Any:
        try:
            data = pickle.dumps(job)
        except (AttributeError, TypeError) as err:  # a local object in the context
            raise pickle.PicklingError(str(err)) from err
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._stop()
                self._start()
            proc = self.proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            deadline = time.monotonic() + RENDER_WALL_SECONDS
            try:
                proc.stdin.write(_HEADER.pack(len(data)) + data)
                proc.stdin.flush()
                fd = proc.stdout.fileno()
                (size,) = _HEADER.unpack(self._read(fd, _HEADER.size, deadline))
                if size > MAX_ANSWER_BYTES:
                    self._stop()
                    raise RenderLimitExceeded(
                        f"the rendered values are {size} bytes (at most {MAX_ANSWER_BYTES})"
                    )
                answer = self._read(fd, size, deadline)
            except TimeoutError:
                self._stop()
                raise RenderLimitExceeded(
                    f"rendering took longer than {RENDER_WALL_SECONDS:g}s"
                ) from None
            except (EOFError, BrokenPipeError, OSError):
                status = self._stop()
                raise RenderLimitExceeded(_death(status)) from None
        kind, value = pickle.loads(answer)  # our own helper's answer
        if kind == "memory":
            raise RenderLimitExceeded(
                f"rendering needed more than {RENDER_MEMORY_BYTES // (1024 * 1024)} MiB of memory"
            )
        if kind == "raised":
            raise value
        return value


def _death(status: int | None) -> str:
    if status == EXIT_OUT_OF_MEMORY:  # a MemoryError the helper could not even report
        return f"rendering needed more than {RENDER_MEMORY_BYTES // (1024 * 1024)} MiB of memory"
    if status is not None and status < 0:
        return f"the rendering process died of signal {-status}"
    return "the rendering process ended without an answer"


class _Pool:
    """Up to ``size`` helpers, each serving one render at a time: a slow template holds one
    helper for its RENDER_WALL_SECONDS, not every render of the process (webserver threads,
    a worker's parallel attempts). Helpers start on demand and stay for the next render."""

    def __init__(self, size: int) -> None:
        self.slots = threading.BoundedSemaphore(size)
        self.lock = threading.Lock()
        self.idle: list[_Helper] = []

    def call(self, job: Any) -> Any:
        with self.slots:
            with self.lock:
                helper = self.idle.pop() if self.idle else _Helper()
            try:
                return helper.call(job)
            finally:
                with self.lock:
                    self.idle.append(helper)

    def stop(self) -> None:
        with self.lock:
            for helper in self.idle:
                helper._stop()


_pool = _Pool(MAX_HELPERS)


def _forget_in_child() -> None:
    """A forked child gets helpers of its own: its parent's pipes are the parent's (a render
    through them would mix with the parent's), and the child's copies of them would keep a
    helper alive after the parent is gone. Takes no lock: the child has one thread."""
    global _pool
    for helper in _pool.idle:
        proc, helper.proc = helper.proc, None
        for pipe in (proc.stdin, proc.stdout) if proc is not None else ():
            if pipe is not None:
                pipe.close()
        if proc is not None:
            proc.returncode = 0  # not the child's to wait for
    _pool = _Pool(MAX_HELPERS)


os.register_at_fork(after_in_child=_forget_in_child)


def run_limited(job: Any) -> Any:
    """``render_helper.perform(job)`` in one of this process's helpers: its answer, or what
    it raised (re-raised here), or RenderLimitExceeded."""
    try:
        return _pool.call(job)
    except (OSError, pickle.PicklingError) as err:  # the sandbox alone bounds this render
        log.warning("rendering in this process, without its helper: %s", err)
        return perform(job)
