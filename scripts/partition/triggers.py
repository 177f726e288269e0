"""Deferred tasks in the partition run: a DAG whose task defers on a time trigger, the
``raftsched triggerer`` processes that run the triggers, and invariant 8, "every committed
firing is consumed exactly once" (docs/architecture.md §17).

``pt_deferred`` (``* * * * * */2``, catch-up, the workload's window): task ``wait`` records
its execution as every workload task does (``TASK_SCRIPT``, run as a child, so the
execution checks of invariants 2 and 3 see it), then defers on a time trigger due
``DEFER_SECONDS`` after its logical date. Its resumption first appends a ``resume`` record
to the worker's JSONL file (its key, try, the moment it waited for and the event it got),
then records its execution the same way, and succeeds.

``Triggerers``: ``count`` triggerers in the root namespace against every node's gRPC
address, like the workers; the ``kill-triggerer`` nemesis kill -9s one and starts a new
generation at its heal (its triggers are leased again once their leases expire).

Invariant 8 (:func:`check_firings_consumed_once`), from the DB's attempt rows and the
``resume`` records. A committed firing is a deferred attempt row (try n) whose message ends
"it fired" (FireTriggers writes it in the apply that queues the task again). Then:

- RESUMED_WITHOUT_FIRING: a resume record of try m without a fired deferral of try m - 1;
- WRONG_EVENT: a resume record whose event is not the moment its own trigger waited for;
- DOUBLE_RESUME: two resume records of one try (one firing resumed twice);
- NOT_RESUMED: the attempt after a firing ran (an execution record) but got no event;
- FIRING_LOST: a fired deferral whose run finished with no attempt after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from scripts.partition.cluster import child_env
from scripts.partition.verdict import Verdict

DAG_ID = "pt_deferred"
DEFER_SECONDS = 3
FIRED_SUFFIX = "it fired"
STOP_TIMEOUT = 10.0


def dag_file(start: datetime, end: datetime, task_script: Path) -> str:
    return textwrap.dedent(
        f"""\
        import json
        import os
        import subprocess
        import time
        from datetime import datetime, timedelta

        from raftsched import DAG, PythonTask
        from raftsched.dags.deferral import DateTimeTrigger, TaskDeferred

        SCRIPT = {str(task_script)!r}


        def _executed():  # this attempt's execution record, as every workload task's
            subprocess.run(["bash", SCRIPT, "0", "0"], check=True)


        def wait():
            _executed()
            logical = datetime.fromisoformat(os.environ["RAFTSCHED_LOGICAL_DATE"])
            due = logical + timedelta(seconds={DEFER_SECONDS})
            raise TaskDeferred(DateTimeTrigger(due), "resume", {{"due": due.isoformat()}}, 600)


        def resume(due, event):
            record = {{
                "event": "resume",
                "dag_id": os.environ["RAFTSCHED_DAG_ID"],
                "run_id": os.environ["RAFTSCHED_RUN_ID"],
                "task_id": os.environ["RAFTSCHED_TASK_ID"],
                "try": int(os.environ["RAFTSCHED_TRY_NUMBER"]),
                "due": due,
                "fired": event,
                "worker": os.environ.get("PT_WORKER", "?"),
                "t": time.time(),
            }}
            with open(os.environ["PT_EXEC_LOG"], "a") as log:
                log.write(json.dumps(record) + "\\n")
            _executed()


        with DAG(
            {DAG_ID!r},
            schedule="* * * * * */2",
            start_date=datetime.fromisoformat({start.isoformat()!r}),
            end_date=datetime.fromisoformat({end.isoformat()!r}),
            catchup=True,
            max_active_runs=1000000,
        ):
            PythonTask("wait", fn=wait)
        """
    )


# -- the triggerer processes ----------------------------------------------------------------


@dataclass
class _Triggerer:
    index: int
    generation: int
    proc: subprocess.Popen[bytes]


class Triggerers:
    """``count`` ``raftsched triggerer`` processes in the root namespace."""

    def __init__(
        self, workdir: Path, servers: list[str], config: Path, token: str, count: int = 2
    ) -> None:
        self.servers, self.config, self.token, self.count = servers, config, token, count
        self.log_dir = workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[int, _Triggerer] = {}
        self.kills = 0

    def start(self) -> None:
        for i in range(self.count):
            self.start_one(i)

    def start_one(self, i: int) -> None:
        previous = self._procs.get(i)
        generation = 0 if previous is None else previous.generation + 1
        argv = [sys.executable, "-m", "raftsched", "--config", str(self.config), "triggerer"]
        argv += ["--server", ",".join(self.servers), "--token", self.token]
        argv += ["--triggerer-id", f"pt-t{i}-g{generation}"]
        with open(self.log_dir / f"triggerer-{i}.log", "ab", buffering=0) as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} partition: start g{generation}\n".encode())
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(),
                start_new_session=True,
            )
        self._procs[i] = _Triggerer(i, generation, proc)

    def pid(self, i: int) -> int | None:
        t = self._procs.get(i)
        return t.proc.pid if t is not None and t.proc.poll() is None else None

    def kill(self, i: int) -> None:
        t = self._procs.get(i)
        if t is None or t.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(t.proc.pid, signal.SIGKILL)
        t.proc.wait(timeout=STOP_TIMEOUT)
        self.kills += 1

    def restart(self, i: int) -> None:
        if self.pid(i) is None:
            self.start_one(i)

    def pause(self) -> None:
        """SIGSTOP every triggerer: no firing from now on (the rows hold still)."""
        for t in self._procs.values():
            if t.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(t.proc.pid, signal.SIGSTOP)

    def close(self) -> None:
        for t in self._procs.values():
            if t.proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(t.proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    t.proc.wait(timeout=STOP_TIMEOUT)


# -- invariant 8 ----------------------------------------------------------------------------


def load_resumes(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The ``resume`` records of the workers' JSONL files (a torn last line is skipped)."""
    out = []
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
                if rec.get("event") == "resume":
                    key = (str(rec["dag_id"]), str(rec["run_id"]), str(rec["task_id"]))
                    out.append({**rec, "key": key, "try": int(rec["try"])})
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return out


def _same_moment(a: Any, b: Any) -> bool:
    try:
        return datetime.fromisoformat(str(a)) == datetime.fromisoformat(str(b))
    except ValueError:
        return False


def check_firings_consumed_once(
    attempts: Sequence[Any],
    runs: Sequence[Any],
    executions: Sequence[Any],
    resumes: Sequence[dict[str, Any]],
) -> Verdict:
    verdict = Verdict("firings_consumed_once")
    fired = {
        (a.key, a.try_number)
        for a in attempts
        if a.state == "deferred" and (a.message or "").endswith(FIRED_SUFFIX)
    }
    tries = {(a.key, a.try_number) for a in attempts}
    finished = {(r.dag_id, r.run_id) for r in runs if r.state in ("success", "failed")}
    ran = {(e.key, e.try_number) for e in executions}
    by_try: dict[tuple[Any, int], list[dict[str, Any]]] = defaultdict(list)
    for rec in resumes:
        key = tuple(rec.get("key") or (rec["dag_id"], rec["run_id"], rec["task_id"]))
        by_try[(key, int(rec["try"]))].append(rec)
    verdict.checked = len(fired) + len(resumes)
    for (key, n), recs in sorted(by_try.items()):
        name = f"{'/'.join(key)} try {n}"
        if (key, n - 1) not in fired:
            verdict.add(
                "RESUMED_WITHOUT_FIRING",
                f"{name} resumed, but no committed firing of try {n - 1}",
                key=list(key),
                try_number=n,
            )
        for rec in recs:
            if not _same_moment(rec.get("fired"), rec.get("due")):
                verdict.add(
                    "WRONG_EVENT",
                    f"{name} resumed with {rec.get('fired')!r}, its trigger waited for"
                    f" {rec.get('due')!r}",
                    key=list(key),
                    try_number=n,
                )
        if len(recs) > 1:
            verdict.add(
                "DOUBLE_RESUME",
                f"{name} resumed {len(recs)} times from one firing",
                key=list(key),
                try_number=n,
                workers=[r.get("worker") for r in recs],
            )
    for key, n in sorted(fired):
        name = f"{'/'.join(key)} try {n}"
        if (key, n + 1) in ran and (key, n + 1) not in by_try:
            verdict.add(
                "NOT_RESUMED",
                f"{name} fired; the attempt after it ran without the event",
                key=list(key),
                try_number=n,
            )
        elif (key, n + 1) not in tries and key[:2] in finished:
            verdict.add(
                "FIRING_LOST",
                f"{name} fired, its run finished, and no attempt came after it",
                key=list(key),
                try_number=n,
            )
    verdict.notes.append(f"{len(fired)} committed firings, {len(resumes)} resumed attempts")
    return verdict
