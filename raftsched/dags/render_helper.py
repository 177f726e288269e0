"""``python -m raftsched.dags.render_helper MEMORY_BYTES``: the process a task's templates
render in (see :mod:`raftsched.dags.render_limits`, which starts it and talks to it).

It limits its own address space to what it has after start-up plus MEMORY_BYTES, writes
``R`` (ready), then answers jobs read from stdin, one at a time, each an 8-byte big-endian
length and a pickle, with an answer of the same shape on stdout: ``("ok", value)``,
``("raised", error)`` or ``("memory", None)``. After a MemoryError, or a render that left it
holding more than a quarter of MEMORY_BYTES, it answers and exits; the next render starts a
new helper. It exits when stdin closes (its caller is gone). It never logs: stderr goes
nowhere.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import struct
import sys
from typing import Any, BinaryIO

_HEADER = struct.Struct(">Q")
EXIT_OUT_OF_MEMORY = 3


def perform(job: tuple[str, dict[str, Any]]) -> Any:
    """What a job asks for: ``("task", fields)`` renders a task's command, env and kwargs."""
    from raftsched.dags.templating import render_fields

    kind, fields = job
    if kind != "task":
        raise ValueError(f"unknown render job {kind!r}")
    return render_fields(**fields)


def _read(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if data is not None and len(data) == size else None


def _statm(field: int) -> int:
    """Bytes of /proc/self/statm's ``field`` (0: address space, 1: resident)."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[field]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(extra: int) -> None:
    now = _statm(0)
    resource.setrlimit(resource.RLIMIT_AS, (now + extra, now + extra))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _grown(baseline: int, extra: int) -> bool:
    """True once a render left the helper holding more than a quarter of its extra memory:
    freed memory is not always given back, and the next render should start from clean."""
    try:
        return _statm(1) - baseline > extra // 4
    except (OSError, ValueError, IndexError):
        return False


def serve(stdin: BinaryIO, stdout: BinaryIO, extra: int = 0) -> int:
    baseline = _statm(1) if extra else 0
    stdout.write(b"R")  # ready: render_limits waits for it before the first job
    stdout.flush()
    while True:
        header = _read(stdin, _HEADER.size)
        if header is None:
            return 0
        job = _read(stdin, _HEADER.unpack(header)[0])
        if job is None:
            return 0
        out_of_memory = False
        try:
            answer: tuple[str, Any] = ("ok", perform(pickle.loads(job)))
        except MemoryError:
            answer, out_of_memory = ("memory", None), True
        except Exception as err:  # carried to the caller, raised there
            answer = ("raised", err)
        try:
            data = pickle.dumps(answer)
        except MemoryError:
            return EXIT_OUT_OF_MEMORY
        except Exception as err:  # an error that does not pickle: its text does
            data = pickle.dumps(("raised", RuntimeError(str(err)[:1000])))
        stdout.write(_HEADER.pack(len(data)) + data)
        stdout.flush()
        if out_of_memory or (extra and _grown(baseline, extra)):
            return 0


def main(argv: list[str]) -> int:
    from raftsched import taskenv

    # First: exec made this process dumpable, and every attempt's declared secrets pass
    # through its memory (its render context): a task of the same user must not read it.
    taskenv.protect_this_process()
    import raftsched.dags.templating  # noqa: F401 - imported before the limit applies

    extra = 0
    # no /proc, or a hard limit already lower: render under what there is
    with contextlib.suppress(OSError, ValueError, IndexError):
        _limit_memory(int(argv[0]))
        extra = int(argv[0])
    return serve(sys.stdin.buffer, sys.stdout.buffer, extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
