"""The leader's DAG parse thread: parse the DAG folder in the background, publish results.

A slow or hanging DAG file must not hold up scheduling, so parsing runs here (each file in
its own child process, see ``raftsched.dags.parser``) and the leader loop takes the latest
result when it is ready.

When: at start; whenever the files' (path, mtime, size) change (checked every
``poll_interval`` seconds, cheap ``stat`` calls); and a full re-parse, cache dropped, every
``full_interval`` seconds (``min_file_process_interval``: catches changes in modules the DAG
files import). A missing folder is logged and publishes nothing (it does not remove DAGs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from raftsched.cluster.metrics import NodeInstruments
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.dags.parser import DagFileParser, dag_files

log = logging.getLogger(__name__)

Parsed = tuple[list[DagSpec], list[ImportErrorRecord]]


class ParseThread:
    def __init__(
        self,
        folder: Path,
        *,
        timeout: float,
        output_limit: int,
        full_interval: float,
        on_result: Callable[[], None],
        poll_interval: float = 1.0,
        max_workers: int = 2,
        catchup_by_default: bool = False,
        instruments: NodeInstruments | None = None,
    ) -> None:
        self._folder = Path(folder)
        self._instruments = instruments if instruments is not None else NodeInstruments()
        self._catchup_by_default = catchup_by_default
        self._timeout = timeout
        self._output_limit = output_limit
        self._full_interval = full_interval
        self._on_result = on_result
        self._poll = poll_interval
        self._max_workers = max_workers
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest: Parsed | None = None
        self._thread = threading.Thread(target=self._run, name="dag-parser", daemon=True)
        self.parses = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to stop; a parse in progress finishes in the background."""
        self._stop.set()
        self._thread.join(timeout)

    def take(self) -> Parsed | None:
        """The newest result not taken yet, or None."""
        with self._lock:
            latest, self._latest = self._latest, None
            return latest

    def _run(self) -> None:
        parser = self._new_parser()
        last_stamps: object = None
        last_full = time.monotonic()
        missing_logged = False
        # The broken file versions already counted in raftsched_dag_parse_errors_total: a file
        # broken for an hour is counted once, not once per parse; edited and still broken
        # (a new mtime or size) it counts again. Only the last parse's are kept.
        counted: frozenset[tuple[str, int, int]] = frozenset()
        while not self._stop.is_set():
            try:
                stamps = _stamps(self._folder)
            except FileNotFoundError as err:
                if not missing_logged:
                    log.warning("%s; no DAGs are loaded from it", err)
                    missing_logged = True
                self._stop.wait(self._poll)
                continue
            missing_logged = False
            full_due = time.monotonic() - last_full >= self._full_interval
            if stamps != last_stamps or full_due:
                if full_due:
                    parser = self._new_parser()
                    last_full = time.monotonic()
                started = time.monotonic()
                try:
                    result = parser.parse()
                except Exception:
                    log.exception("parsing %s failed", self._folder)
                    self._instruments.dag_parse_errors.inc()
                    self._stop.wait(self._poll)
                    continue
                self.parses += 1
                self._instruments.dag_parse_duration.observe(time.monotonic() - started)
                broken = _versions(result.errors, stamps)
                if broken - counted:
                    self._instruments.dag_parse_errors.inc(len(broken - counted))
                counted = broken
                log.debug(
                    "parsed %s: %d DAGs, %d errors in %.2fs",
                    self._folder,
                    len(result.specs),
                    len(result.errors),
                    time.monotonic() - started,
                )
                last_stamps = stamps
                with self._lock:
                    self._latest = (list(result.specs), list(result.errors))
                self._on_result()
            self._stop.wait(self._poll)

    def _new_parser(self) -> DagFileParser:
        return DagFileParser(
            self._folder,
            timeout=self._timeout,
            output_limit=self._output_limit,
            max_workers=self._max_workers,
            cache=True,
            catchup_by_default=self._catchup_by_default,
        )


def _versions(
    errors: list[ImportErrorRecord], stamps: frozenset[tuple[str, int, int]]
) -> frozenset[tuple[str, int, int]]:
    """(path, mtime_ns, size) of each file that failed, as stat'ed before the parse read it;
    a file the stat did not see (gone since, or an error not about one file) is keyed by its
    fileloc alone."""
    by_path = {stamp[0]: stamp for stamp in stamps}
    return frozenset(by_path.get(e.fileloc, (e.fileloc, 0, 0)) for e in errors)


def _stamps(folder: Path) -> frozenset[tuple[str, int, int]]:
    out = set()
    for path in dag_files(folder):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        out.add((str(path), st.st_mtime_ns, st.st_size))
    return frozenset(out)
