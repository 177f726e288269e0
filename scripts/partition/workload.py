"""The partition run's workload: DAGs that keep workers busy, and the workers themselves.

DAGs (all with catch-up, ``max_active_runs`` unbounded, ``end_date`` closing the fault
window; every task runs ``bash TASK_SCRIPT MAX_SECONDS FAIL_UNTIL_TRY``):

    pt_every_second  * * * * * *      quick (0-0.5 s) >> work (0-3 s)
    pt_every_2s      * * * * * */2    flaky (0-2 s, fails try 1; retries=2, retry_delay 1 s)
                                      >> after (0-1 s)
    pt_every_5s      * * * * * */5    [wide_a, wide_b] (0-3 s each) and doomed (fails every
                                      try; retries=2): these runs end "failed"

A task's duration is pseudo-random from its logical date and task id (the same on every try
and every machine). ``POISON_DAG`` (manual, ``poison_dag_file``) is not part of the workload:
the poison nemesis writes it and triggers it during its faults; its task runs ``TASK_SCRIPT``
with a third argument ``poison`` and then prints a NUL byte and bytes that are not UTF-8 on
stdout and stderr (the worker must ship them sanitized, the DB must take them).

``TASK_SCRIPT`` records the task's real execution to ``$PT_EXEC_LOG``
(the worker's JSONL file, set in the worker's environment): ``start`` once an outside watcher
(its own session, so the worker's SIGKILL of the attempt's group does not reach it) is
watching, ``end`` with the exit code on a normal exit, ``gone`` from the watcher when the
process has gone (within 50 ms: ``tail --pid``), also after a SIGKILL. ``history.py`` reads
these files (``load_executions``); tokens come from the DB attempt row of each try, since the
worker does not pass the fencing token to the task.

``Workers`` runs N ``raftsched worker`` processes in the root namespace against every node's
gRPC address (the bridge reaches all namespaces; faults are rules inside the nodes'
namespaces, so a worker keeps reaching whichever node it can). Each has its own process
group; ``kill`` is a SIGKILL of the worker only (its attempts live on in their own sessions,
as after a real crash), ``restart`` starts a new generation with a new worker id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from raftsched.taskenv import DEFAULT_ALLOWLIST
from scripts.partition.cluster import child_env, config_text

WORKER_TOKEN = "partition-worker-token-0123456789"
ADMIN_TOKEN = "partition-admin-token-0123456789"
API_PORT = 7301  # Raft port 7101 + 200
LEASE_TTL = 10  # seconds: short, so a killed worker's leases come back soon
HEARTBEAT_INTERVAL = 2
CONCURRENCY = 4
STOP_TIMEOUT = 10.0

TASK_SCRIPT = r"""#!/usr/bin/env bash
# pt_task.sh MAX_SECONDS FAIL_UNTIL_TRY [poison]: record this execution, sleep, succeed or
# fail; with "poison", print a NUL byte and bytes that are not UTF-8 first.
set -u
max=$1 fail_until=$2 log=${PT_EXEC_LOG:?} try=$RAFTSCHED_TRY_NUMBER
fmt='{"dag_id":"%s","run_id":"%s","task_id":"%s","try":%d,"pid":%d,"wpid":%d,"worker":"%s"'
head=$(printf "$fmt" "$RAFTSCHED_DAG_ID" "$RAFTSCHED_RUN_ID" "$RAFTSCHED_TASK_ID" "$try" \
  "$$" "$PPID" "${PT_WORKER:-?}")
# the watcher leaves our session before we start, so a SIGKILL of our group spares it
exec 3< <(exec setsid bash -c 'echo up; exec >/dev/null
  tail --pid="$1" -s 0.05 -f /dev/null
  printf "%s,\"event\":\"gone\",\"t\":%s}\n" "$2" "$EPOCHREALTIME" >>"$3"' \
  watcher "$$" "$head" "$log" </dev/null 2>/dev/null)
read -r -t 10 _ <&3
exec 3<&-
printf '%s,"event":"start","t":%s}\n' "$head" "$EPOCHREALTIME" >>"$log"
if [[ ${3:-} == poison ]]; then
  printf 'poison stdout: a\000b x\377\376y\n'
  printf 'poison stderr: e\000f \377\n' >&2
fi
digits=${RAFTSCHED_LOGICAL_DATE//[^0-9]/}0
RANDOM=$(( (10#${digits:0:14} + ${#RAFTSCHED_TASK_ID} * 7919) % 32768 ))
ms=$(( RANDOM * 32768 + RANDOM ))
ms=$(( ms % (max * 1000 + 1) ))
sleep "$(( ms / 1000 )).$(printf '%03d' $(( ms % 1000 )))"
rc=0
if (( try <= fail_until )); then
  echo "planted failure: try $try of a task that fails until try $fail_until" >&2
  rc=1
fi
printf '%s,"event":"end","rc":%d,"t":%s}\n' "$head" "$rc" "$EPOCHREALTIME" >>"$log"
exit $rc
"""


def dag_files(start: datetime, end: datetime, task_script: Path) -> dict[str, str]:
    """The workload's DAG files, scheduled over [start, end]."""

    def dag(dag_id: str, cron: str, body: str) -> str:
        head = textwrap.dedent(
            f"""\
            from datetime import datetime, timedelta

            from raftsched import DAG, BashTask

            SCRIPT = {str(task_script)!r}


            def task(task_id, max_seconds, fail_until=0, **kw):
                command = f"exec bash {{SCRIPT}} {{max_seconds}} {{fail_until}}"
                return BashTask(task_id, command=command, **kw)


            with DAG(
                {dag_id!r},
                schedule={cron!r},
                start_date=datetime.fromisoformat({start.isoformat()!r}),
                end_date=datetime.fromisoformat({end.isoformat()!r}),
                catchup=True,
                max_active_runs=1000000,
            ) as dag:
            """
        )
        return head + textwrap.indent(textwrap.dedent(body), "    ")

    retry = "retries=2, retry_delay=timedelta(seconds=1)"
    return {
        "pt_every_second.py": dag(
            "pt_every_second",
            "* * * * * *",
            """\
            quick = task("quick", 0)
            quick >> task("work", 3)
            """,
        ),
        "pt_every_2s.py": dag(
            "pt_every_2s",
            "* * * * * */2",
            f"""\
            flaky = task("flaky", 2, fail_until=1, {retry})
            flaky >> task("after", 1)
            """,
        ),
        "pt_every_5s.py": dag(
            "pt_every_5s",
            "* * * * * */5",
            f"""\
            task("wide_a", 3)
            task("wide_b", 3)
            task("doomed", 0, fail_until=99, {retry})
            """,
        ),
    }


POISON_DAG = "pt_poison"


def poison_dag_file(task_script: Path) -> str:
    """The manual DAG the poison nemesis triggers: one task printing NUL and invalid UTF-8,
    recorded by TASK_SCRIPT like every other task (the checker sees its executions)."""
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        with DAG(
            {POISON_DAG!r},
            schedule=None,
            start_date=datetime(2024, 1, 1),
            max_active_runs=1000000,
        ) as dag:
            BashTask("hostile_output", command={f"exec bash {task_script} 1 0 poison"!r})
        """
    )


@dataclass
class _Worker:
    index: int
    generation: int
    proc: subprocess.Popen[bytes]

    @property
    def worker_id(self) -> str:
        return f"pt-w{self.index}-g{self.generation}"


class Workers:
    """``count`` ``raftsched worker`` processes in the root namespace."""

    def __init__(self, workdir: Path, servers: list[str], count: int = 2) -> None:
        self.workdir = workdir
        self.servers = servers
        self.count = count
        self.exec_dir = workdir / "executions"
        self.log_dir = workdir / "logs"
        for folder in (self.exec_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "worker.cfg"
        self.config_path.write_text(
            config_text(
                {
                    "core": {"home": workdir, "logging_level": "INFO"},
                    "worker": {
                        "lease_ttl": LEASE_TTL,
                        "heartbeat_interval": HEARTBEAT_INTERVAL,
                        "grace_period": 5,
                        "concurrency": CONCURRENCY,
                        # PT_EXEC_LOG, PT_WORKER for the task script (tasks get an allow-listed env)
                        "task_env_allowlist": ",".join((*DEFAULT_ALLOWLIST, "PT_*")),
                    },
                }
            )
        )
        self._workers: dict[int, _Worker] = {}
        self.kills = 0
        # worker id -> when it was kill -9'd (its guard then kills its attempts' trees)
        self.deaths: dict[str, float] = {}

    @property
    def exec_logs(self) -> list[Path]:
        return sorted(self.exec_dir.glob("*.jsonl"))

    def start(self) -> None:
        for i in range(self.count):
            self.start_worker(i)

    def start_worker(self, i: int) -> None:
        previous = self._workers.get(i)
        generation = 0 if previous is None else previous.generation + 1
        worker_id = f"pt-w{i}-g{generation}"
        env = child_env()
        env.update(PT_EXEC_LOG=str(self.exec_dir / f"{worker_id}.jsonl"), PT_WORKER=worker_id)
        argv = [
            sys.executable,
            "-m",
            "raftsched",
            "--config",
            str(self.config_path),
            "worker",
            "--server",
            ",".join(self.servers),
            "--token",
            WORKER_TOKEN,
            "--worker-id",
            worker_id,
        ]
        with open(self.log_dir / f"worker-{i}.log", "ab", buffering=0) as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} partition: start {worker_id}\n".encode())
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._workers[i] = _Worker(i, generation, proc)

    def pid(self, i: int) -> int | None:
        w = self._workers.get(i)
        return w.proc.pid if w is not None and w.proc.poll() is None else None

    def alive(self) -> list[int]:
        return [i for i in self._workers if self.pid(i) is not None]

    def worker_id(self, i: int) -> str:
        return self._workers[i].worker_id

    def kill(self, i: int) -> None:
        """SIGKILL worker i only (not its attempts: they run on, as after a crash)."""
        w = self._workers.get(i)
        if w is None or w.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait(timeout=STOP_TIMEOUT)
        self.kills += 1
        self.deaths[w.worker_id] = time.time()

    def restart(self, i: int) -> None:
        if self.pid(i) is None:
            self.start_worker(i)

    def pause(self) -> None:
        """SIGSTOP every worker: no new lease, outcome or heartbeat from now on."""
        for w in self._workers.values():
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.proc.pid, signal.SIGSTOP)

    def close(self) -> None:
        """SIGKILL each worker's process group (with any attempt still in it) and reap."""
        for w in self._workers.values():
            if w.proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(w.proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(timeout=STOP_TIMEOUT)

    def log_tail(self, i: int, lines: int = 30) -> str:
        try:
            text = (self.log_dir / f"worker-{i}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
