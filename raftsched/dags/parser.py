"""The DAG file parser: each file is imported in its own child process.

A file that raises, hangs, floods its output, has a syntax error or defines something invalid
costs only its own result: one ``ImportErrorRecord`` (file, one-line message, traceback).

- Files: every ``*.py`` under the folder, recursively, except names (of files or folders)
  starting with ``_`` or ``.``. Parsed in sorted path order, up to ``max_workers`` at once.
- Timeout: the child runs in its own session; past ``timeout`` seconds it is sent SIGUSR1
  (its faulthandler dumps its stacks to stderr, which becomes the error's traceback, so the
  user sees where it hung), and ``DUMP_GRACE`` later its whole process group is killed.
- Output cap: stdout and stderr are drained in 64 KiB chunks as they come; the first
  ``output_limit`` bytes are kept, the rest discarded. A file that prints more than that is an
  error (its DAGs are not loaded): a DAG file should define DAGs, not talk.
- A file that defines no DAG is NOT an error (helper modules are normal, as in Airflow); it
  is listed in ``ParseResult.empty_files`` so `raftsched dags parse` can point it out.
- Environment: the child gets only the allow-listed part of this process's environment
  (``raftsched.taskenv``), so a DAG file's code never sees the cluster secret, the
  database URL or a token set as ``RAFTSCHED__*`` (or ``RAFTSCHED_TOKEN``/``RAFTSCHED_CONFIG``);
  this process makes itself non-dumpable first, so the child cannot read them in /proc either.
- A dag_id defined by two files: the file later in path order gets an error for it (its
  other DAGs still load).
- Bounds (``raftsched.core.limits``): the specs a child sends are checked again here
  (``validation.check_spec``): a file whose DAG breaks a bound is an error, never a
  registration the cluster would refuse. An error's message and traceback are sanitized (NUL,
  invalid UTF-8 -> U+FFFD) and cut to MAX_IMPORT_ERROR_CHARS, its fileloc to
  MAX_FILELOC_CHARS; at most MAX_IMPORT_ERRORS errors are reported (the last one says how many
  more there were).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import raftsched
from raftsched import taskenv
from raftsched.core import limits
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.dags import mapping, validation
from raftsched.errors import DagDefinitionError

CHUNK = 65536
MAX_RESULT_BYTES = 64 * 1024 * 1024
TRACEBACK_LIMIT = min(16 * 1024, limits.MAX_IMPORT_ERROR_CHARS)
MESSAGE_LIMIT = min(2_000, limits.MAX_IMPORT_ERROR_CHARS)  # an error's one line
KILL_GRACE = 2.0  # seconds to drain pipes after killing a child
DUMP_GRACE = 0.3  # seconds for a timed-out child's stack dump (a C signal handler: immediate)
DUMP_SIGNAL = signal.SIGUSR1  # what raftsched.dags._child registers faulthandler on


@dataclass
class ParseResult:
    specs: list[DagSpec] = field(default_factory=list)
    errors: list[ImportErrorRecord] = field(default_factory=list)
    empty_files: list[str] = field(default_factory=list)  # parsed fine, defined no DAG

    def to_dict(self) -> dict[str, object]:
        return {
            "dags": [spec.to_dict() for spec in self.specs],
            "errors": [
                {"fileloc": e.fileloc, "message": e.message, "traceback": e.traceback}
                for e in self.errors
            ],
            "empty_files": list(self.empty_files),
        }


@dataclass(frozen=True)
class FileResult:
    path: str
    specs: tuple[DagSpec, ...] = ()
    error: ImportErrorRecord | None = None


def dag_files(folder: Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"DAGs folder {str(folder)!r} does not exist or is not a folder")
    found = []
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).parts
        if not any(part.startswith(("_", ".")) for part in parts) and path.is_file():
            found.append(path.resolve())
    return sorted(found)


def parse_file(
    path: Path | str, *, timeout: float, output_limit: int, catchup_by_default: bool = False
) -> ParseResult:
    return _combine([_run_child(Path(path).resolve(), timeout, output_limit, catchup_by_default)])


def parse_folder(
    folder: Path | str,
    *,
    timeout: float,
    output_limit: int,
    max_workers: int = 2,
    catchup_by_default: bool = False,
) -> ParseResult:
    parser = DagFileParser(
        folder,
        timeout=timeout,
        output_limit=output_limit,
        max_workers=max_workers,
        cache=False,
        catchup_by_default=catchup_by_default,
    )
    return parser.parse()


class DagFileParser:
    """Parses a folder again and again, re-running only files whose (mtime, size) changed.

    The cache does not see changes in modules a DAG file imports; build a new parser (or pass
    cache=False) to force a full parse. Not thread-safe: one caller at a time.
    ``catchup_by_default``: the catchup of a DAG that does not set it ([scheduler]
    catchup_by_default).
    """

    def __init__(
        self,
        folder: Path | str,
        *,
        timeout: float,
        output_limit: int,
        max_workers: int = 2,
        cache: bool = True,
        catchup_by_default: bool = False,
    ) -> None:
        self.folder = Path(folder)
        self.catchup_by_default = catchup_by_default
        self.timeout = timeout
        self.output_limit = output_limit
        self.max_workers = max(1, max_workers)
        self.cache = cache
        self._cache: dict[Path, tuple[tuple[int, int], FileResult]] = {}

    def parse(self) -> ParseResult:
        files = dag_files(self.folder)
        stamps = {path: _stamp(path) for path in files}
        todo = [p for p in files if not self.cache or self._cached(p, stamps[p]) is None]
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            fresh = dict(
                zip(
                    todo,
                    pool.map(self._run_child, todo),
                    strict=True,
                )
            )
        if self.cache:
            self._cache = {p: (stamps[p], fresh.get(p) or self._cache[p][1]) for p in files}
        return _combine(fresh.get(p) or self._cache[p][1] for p in files)

    def _run_child(self, path: Path) -> FileResult:
        return _run_child(path, self.timeout, self.output_limit, self.catchup_by_default)

    def _cached(self, path: Path, stamp: tuple[int, int]) -> FileResult | None:
        hit = self._cache.get(path)
        return hit[1] if hit is not None and hit[0] == stamp else None


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


def import_error(fileloc: str, message: object, traceback: object = "") -> ImportErrorRecord:
    """An ImportErrorRecord whose texts every DB accepts and the cluster's bounds allow: clean
    (NUL, invalid UTF-8 -> U+FFFD), the message cut at its head, the traceback at its tail
    (where the error is), the fileloc kept by its tail (the file's name)."""
    text, tb = limits.clean_text(str(message)), limits.clean_text(str(traceback or ""))
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1] + "\u2026"
    if len(tb) > TRACEBACK_LIMIT:
        tb = "\u2026" + tb[-(TRACEBACK_LIMIT - 1) :]
    where = limits.clean_text(fileloc)
    if len(where) > limits.MAX_FILELOC_CHARS:
        where = "\u2026" + where[-(limits.MAX_FILELOC_CHARS - 1) :]
    return ImportErrorRecord(where, text, tb)


def _combine(results: Iterable[FileResult]) -> ParseResult:
    out = ParseResult()
    owner: dict[str, str] = {}
    for result in results:
        if result.error is not None:
            out.errors.append(import_error(*_fields(result.error)))
            continue
        if not result.specs:
            out.empty_files.append(result.path)
        duplicates = []
        for spec in result.specs:
            if spec.dag_id in owner:
                duplicates.append(spec.dag_id)
                continue
            owner[spec.dag_id] = result.path
            out.specs.append(spec)
        if duplicates:
            out.errors.append(
                import_error(
                    result.path,
                    "; ".join(f"dag_id {d!r} is already defined in {owner[d]}" for d in duplicates),
                )
            )
    most = limits.MAX_IMPORT_ERRORS
    if len(out.errors) > most:
        more = len(out.errors) - (most - 1)
        last = out.errors[most - 1]
        out.errors[most - 1 :] = [
            import_error(
                last.fileloc,
                f"[{more - 1} more files failed to load; only {most} import errors are kept,"
                f" fix these first] {last.message}",
                last.traceback,
            )
        ]
    return out


def _fields(error: ImportErrorRecord) -> tuple[str, str, str]:
    return (error.fileloc, error.message, error.traceback)


class _Capture:
    """Keeps the first ``limit`` bytes of a stream and a short tail; counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data)[-TRACEBACK_LIMIT:]


# What the Airflow layer's settings tell each child (configure_airflow): env name -> "1"
_airflow_env: dict[str, str] = {}


def configure_airflow(*, imports: bool, create_cron_data_intervals: bool) -> None:
    """``[core] airflow_imports`` (``import airflow`` in a DAG file gets raftsched.airflow)
    and ``[scheduler] create_cron_data_intervals`` (the default of an Airflow DAG's
    ``create_cron_data_intervals``) for every child this process starts from now on."""
    _airflow_env.clear()
    if imports:
        _airflow_env["RAFTSCHED_AIRFLOW_IMPORTS"] = "1"
    if create_cron_data_intervals:
        _airflow_env["RAFTSCHED_CREATE_CRON_DATA_INTERVALS"] = "1"


def _run_child(
    path: Path, timeout: float, output_limit: int, catchup_by_default: bool = False
) -> FileResult:
    fileloc = str(path)
    read_fd, write_fd = os.pipe()
    env = taskenv.scrubbed()  # no cluster secret, DB URL or token for the DAG file's code
    env.update(_airflow_env, **mapping.child_env())  # [core] max_map_length
    taskenv.protect_this_process()  # nor through /proc/OUR_PID/environ
    package_root = str(Path(raftsched.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "raftsched.dags._child", str(write_fd), str(timeout)),
                *(fileloc, "1" if catchup_by_default else "0"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            start_new_session=True,
            cwd=str(path.parent),
            env=env,
        )
    except OSError as err:
        os.close(read_fd)
        message = f"could not start the parser process: {err}"
        return FileResult(fileloc, error=import_error(fileloc, message))
    finally:
        os.close(write_fd)
    assert proc.stdout is not None and proc.stderr is not None
    output = _Capture(output_limit)
    stderr = _Capture(0)
    result = bytearray()
    timed_out = dumped = False
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout.fileno(), selectors.EVENT_READ, "out")
        sel.register(proc.stderr.fileno(), selectors.EVENT_READ, "err")
        sel.register(read_fd, selectors.EVENT_READ, "result")
        while sel.get_map():
            wait = deadline - time.monotonic()
            if wait <= 0 and not dumped:
                dumped = True  # the stacks first, so the user sees where it hung
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(DUMP_SIGNAL)
                deadline = time.monotonic() + DUMP_GRACE
                continue
            if wait <= 0:
                if timed_out:
                    break  # killed, yet a pipe stays open (an escaped grandchild): give up
                timed_out = True
                _kill_group(proc)
                deadline = time.monotonic() + KILL_GRACE
                continue
            if not timed_out and read_fd not in sel.get_map() and proc.poll() is not None:
                # The child is done; processes it left behind must not hold the pipes open.
                _kill_group(proc)
                deadline = min(deadline, time.monotonic() + KILL_GRACE)
            for key, _ in sel.select(min(wait, 0.5)):
                data = os.read(key.fd, CHUNK)
                if not data:
                    sel.unregister(key.fd)
                elif key.data == "result":
                    if len(result) <= MAX_RESULT_BYTES:
                        result += data
                else:
                    output.add(data)
                    if key.data == "err":
                        stderr.add(data)
    os.close(read_fd)
    proc.stdout.close()
    proc.stderr.close()
    # asked for its stacks and gave no result (SIGUSR1 before its handler ends it): a timeout
    timed_out = timed_out or (dumped and not result)
    if timed_out:
        _kill_group(proc)
    code = proc.wait()
    return _outcome(fileloc, timeout, output, stderr, bytes(result), code, timed_out)


def _outcome(
    fileloc: str,
    timeout: float,
    output: _Capture,
    stderr: _Capture,
    result: bytes,
    code: int,
    timed_out: bool,
) -> FileResult:
    def error(message: str, tb: str = "") -> FileResult:
        text = tb or stderr.tail.decode(errors="replace")
        return FileResult(fileloc, error=import_error(fileloc, message, text))

    if timed_out:
        return error(
            f"timed out after {timeout:g}s while importing the file (limit: dag_file_timeout);"
            " its processes were killed"
        )
    if output.total > output.limit:
        return error(
            f"printed {output.total} bytes while being imported, more than the limit of"
            f" {output.limit} (dag_file_output_limit); output was truncated",
            output.head.decode(errors="replace")[-TRACEBACK_LIMIT:],
        )
    if len(result) > MAX_RESULT_BYTES:
        return error(f"the DAG definitions are larger than {MAX_RESULT_BYTES} bytes")
    try:
        payload = json.loads(result) if result else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return error(f"the parser process exited with code {code} without a result")
    if "error" in payload:
        failure = payload["error"] if isinstance(payload["error"], dict) else {}
        return error(str(failure.get("message", "")), str(failure.get("traceback", "")))
    try:
        specs = tuple(validation.check_spec(DagSpec.from_dict(d)) for d in payload["specs"])
    except DagDefinitionError as err:  # a bound the child's own checks let through
        return error(str(err))
    except Exception as err:  # a malformed result: never a registration
        return error(f"the parser process sent an invalid result ({type(err).__name__}: {err})")
    return FileResult(fileloc, specs=specs)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
