"""``raftsched dags test DAG``: one run of a DAG on this machine, with no cluster.

Parses the DAGs folder as the scheduler does (each file in a child process), then runs the
DAG's tasks one at a time in dependency order, each as a worker runs an attempt (the same
environment, ``RAFTSCHED_*`` variables, timeout and process cleanup), printing each task's
output as it comes. Trigger rules decide as in the cluster (``core.ready.evaluate_trigger``);
a failed task is tried again at once up to its ``retries`` (no ``retry_delay`` wait: this is
a test). A task's ``queue`` is ignored: every task runs here. Nothing is written anywhere:
no Raft log, no database.

Variables and connections a task declares come from this shell's environment only
(``RAFTSCHED_SECRET_VAR_<NAME>``, ``RAFTSCHED_SECRET_CONN_<ID>``: the worker's environment
backend), never from a cluster.

Exit code 0 when every task succeeded or was skipped, 1 otherwise (as ``airflow dags test``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from raftsched.cli import dags_test_callbacks
from raftsched.cli.output import emit
from raftsched.errors import RaftschedError

_ENDED = ("success", "failed", "upstream_failed", "skipped")
_KNOWN_DAGS: set[str] = set()  # the DAGs of the parsed folder


def register(dags_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    test = dags_sub.add_parser(
        "test",
        help="run one run of a DAG here, task by task, with no cluster (exit 0 if it succeeds)",
        description="Run one run of a DAG on this machine, task by task. DATE is Airflow's"
        " logical date (`airflow dags test ID DATE`): for a DAG whose tasks see the start of"
        " the data interval as logical_date (a timedelta schedule, or"
        " create_cron_data_intervals) the run is the one whose interval starts at DATE;"
        " --logical-date names the run by its scheduled time instead.",
    )
    test.add_argument("dag_id")
    _add_date_args(test)
    test.set_defaults(handler=cmd_test)


def register_tasks(tasks_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    test = tasks_sub.add_parser(
        "test",
        help="run one task of a DAG here, with no cluster (exit 0 if it succeeds)",
        description="Run one task on this machine as a worker would, ignoring its upstream"
        " tasks and trigger rule (their return values are absent), as `airflow tasks test`."
        " Nothing is written to the cluster. DATE as in `dags test`.",
    )
    test.add_argument("dag_id")
    test.add_argument("task_id")
    _add_date_args(test)
    test.set_defaults(handler=cmd_test)


def _add_date_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "date",
        nargs="?",
        metavar="DATE",
        help="Airflow's logical date (ISO-8601; without an offset it is UTC)",
    )
    parser.add_argument("--folder", help="DAGs folder (default: [core] dags_folder of the config)")
    parser.add_argument(
        "--logical-date",
        metavar="ISO_TIME",
        help="the run's scheduled time (default: now); without an offset it is UTC",
    )
    parser.add_argument("--conf", default="{}", metavar="JSON", help="the run's conf (an object)")


def cmd_test(args: argparse.Namespace) -> int:
    from raftsched.cli.dags_cmd import _parse
    from raftsched.core import limits
    from raftsched.core.model import ScheduleKind, TaskKey
    from raftsched.core.timetable import timetable_for
    from raftsched.dags import params as dag_params

    try:
        conf = limits.parse_conf(args.conf, "--conf")
    except ValueError as err:
        raise RaftschedError(f"{err}; pass a JSON object, e.g. --conf '{{\"x\": 1}}'") from None
    if args.date is not None and args.logical_date is not None:
        raise RaftschedError("give DATE or --logical-date, not both")
    result = _parse(args, args.folder)
    spec = next((s for s in result.specs if s.dag_id == args.dag_id), None)
    if spec is None:
        for error in result.errors:
            print(f"import error in {error.fileloc}: {error.message}", file=sys.stderr)
        raise RaftschedError(
            f"DAG {args.dag_id!r} not found in the DAGs folder;"
            " `raftsched dags parse` lists the DAGs it defines and the files that fail"
        )
    only = getattr(args, "task_id", None)
    if only is not None and all(t.task_id != only for t in spec.tasks):
        raise RaftschedError(
            f"DAG {spec.dag_id!r} has no task {only!r}; its tasks:"
            f" {', '.join(sorted(t.task_id for t in spec.tasks)[:20])}"
        )
    try:  # as a trigger's conf: each param's type, enum, range; required ones given
        dag_params.check_conf(spec.params_json, conf, "--conf")
    except ValueError as err:
        raise RaftschedError(str(err)) from None
    logical = scheduled_time(spec, args.date, args.logical_date)
    if spec.schedule.kind in (ScheduleKind.CRON, ScheduleKind.INTERVAL):
        slot = timetable_for(spec).slot_at(logical)
        start, end = slot.data_interval_start, slot.data_interval_end
    else:
        start = end = logical
    run_id = f"test__{logical.isoformat()}"
    what = f"task {only}" if only else f"{len(spec.tasks)} task(s)"
    print(f"{'tasks' if only else 'dags'} test {spec.dag_id}: run {run_id}, {what}, conf {conf}")
    xcoms: dict[str, str] = {}
    _KNOWN_DAGS.clear()
    _KNOWN_DAGS.update(s.dag_id for s in result.specs)  # a TriggerDagRunOperator's targets
    states = _run_tasks(spec, TaskKey, run_id, logical, start, end, conf, xcoms, only)
    rows = [
        {"task_id": task_id, "state": state, "xcom": _short(xcoms.get(task_id, ""))}
        for task_id, state in states.items()
    ]
    emit(rows, output="table", columns=("task_id", "state", "xcom"))
    ok = all(state in ("success", "skipped") for state in states.values())
    if only is None:  # a task test is no run: the DAG's callbacks are not its
        run = dags_test_callbacks.run_context(spec, run_id, logical, start, end, conf)
        dags_test_callbacks.run_ended(spec, run, ok, states)  # the DAG's on_*_callback
    print(f"{'task ' + only if only else 'run ' + run_id}: {'success' if ok else 'failed'}")
    return 0 if ok else 1


def scheduled_time(spec: Any, date: str | None, scheduled: str | None) -> datetime:
    """The run's scheduled time: ``--logical-date`` as it is; a positional DATE is Airflow's
    logical date, which is the start of the data interval for a DAG with that convention
    (the guide's Dates), so its run is the first one scheduled after it."""
    from raftsched.cli.dags_cmd import _parse_after
    from raftsched.core.model import ScheduleKind
    from raftsched.core.timetable import timetable_for
    from raftsched.dags.template_names import interval_start_convention

    if date is None:
        return _parse_after(scheduled).replace(microsecond=0)
    try:
        value = datetime.fromisoformat(date)
    except ValueError:
        raise RaftschedError(
            f"DATE {date[:40]!r} is not an ISO-8601 date or time, e.g. 2024-03-01 or"
            " 2024-03-01T06:00:00+00:00"
        ) from None
    logical = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    logical = logical.replace(microsecond=0)
    if spec.schedule.kind not in (ScheduleKind.CRON, ScheduleKind.INTERVAL) or not any(
        interval_start_convention(t.env) for t in spec.tasks
    ):
        return logical
    after = timetable_for(spec)._after(logical)  # bounds aside: a test may run any interval
    if after is None:
        raise RaftschedError(f"DAG {spec.dag_id!r} has no scheduled time after {logical}")
    return after


def _run_tasks(
    spec: Any,
    task_key: Any,
    run_id: str,
    logical: datetime,
    start: datetime,
    end: datetime,
    conf: dict[str, Any],
    xcoms: dict[str, str],
    only: str | None = None,
) -> dict[str, str]:
    """Each task's state; ``xcoms`` gets each return value (JSON text), as the cluster keeps
    it, and a branch skips the direct downstream tasks it does not follow. A mapped task
    runs its instances one by one (``task_id[i]``, each with its own tries) and hands the
    list of their values on, as the cluster does (core/mapping.py). ``only``: that task alone
    (``tasks test``), whatever its upstream tasks did."""
    from raftsched.core import mapping
    from raftsched.core.model import TaskState
    from raftsched.core.ready import UpstreamCounts, Verdict, evaluate_trigger

    states: dict[str, str] = {}
    run = dags_test_callbacks.run_context(spec, run_id, logical, start, end, conf)
    downstream = {
        t.task_id: sorted(d.task_id for d in spec.tasks if t.task_id in d.upstream)
        for t in spec.tasks
    }
    for task in _in_order(spec.tasks):
        if only is not None and task.task_id != only:
            continue
        if task.task_id in states:  # skipped by a branch
            continue
        upstream = UpstreamCounts.of(TaskState(states[u]) for u in task.upstream if u in states)
        verdict = evaluate_trigger(task.trigger_rule, upstream) if only is None else None
        if verdict in (Verdict.UPSTREAM_FAILED, Verdict.SKIPPED):
            states[task.task_id] = str(verdict)
            print(f"--- {task.task_id}: {verdict} (trigger rule {task.trigger_rule})")
            continue
        if task.kind == "empty":  # as the cluster: finished at once, nothing runs
            states[task.task_id] = "success"
            print(f"--- {task.task_id}: success (empty task: nothing runs)", flush=True)
            continue
        ups = {u: xcoms[u] for u in task.upstream if u in xcoms}
        attempts = _Attempts(spec, task_key, run_id, logical, start, end, conf, run)
        if not getattr(task, "expand_json", ""):
            state, outcome = attempts.run(task, task.task_id, ups)
            states[task.task_id] = state
            if state == "success" and outcome.result_json:
                xcoms[task.task_id] = outcome.result_json
            follow = outcome.follow if outcome.success else None
            for other in downstream[task.task_id] if only is None else ():
                if follow is not None and other not in follow:
                    states[other] = "skipped"
                    print(f"--- {other}: skipped (branch {task.task_id})", flush=True)
            continue
        count, reason = mapping.count_items(task, ups.get)
        if not count:
            states[task.task_id] = "failed" if reason else "skipped"
            print(f"--- {task.task_id}: {states[task.task_id]}: {reason or 'mapped over 0 items'}")
            continue
        print(f"--- {task.task_id}: mapped into {count} instances", flush=True)
        values, ended = [], []
        for index in range(count):
            instance = mapping.instance_task(task, index, ups)
            state, outcome = attempts.run(instance, mapping.instance_id(task.task_id, index), ups)
            ended.append(TaskState(state))
            values.append(outcome.result_json or "null" if state == "success" else "null")
        states[task.task_id] = str(mapping.joint_of(ended))
        print(f"--- {task.task_id}: {states[task.task_id]} ({count} instances)", flush=True)
        if states[task.task_id] == "success":
            xcoms[task.task_id] = "[" + ",".join(values) + "]"
    return states


class _Attempts:
    """Runs one task (or mapped instance) here, try after try, as a worker would."""

    def __init__(
        self,
        spec: Any,
        task_key: Any,
        run_id: str,
        logical: datetime,
        start: datetime,
        end: datetime,
        conf: dict[str, Any],
        run: Any,
    ) -> None:
        self.spec, self.task_key, self.run_id, self.context = spec, task_key, run_id, run
        self.logical, self.start, self.end, self.conf = logical, start, end, conf

    def run(self, task: Any, instance_id: str, ups: dict[str, str]) -> tuple[str, Any]:
        """(state, last outcome) of ``task`` run as ``instance_id``."""
        from raftsched.worker.runner import Attempt
        from raftsched.worker.task_secrets import with_secrets
        from raftsched.worker.transport import Assignment

        spec = self.spec
        downstream = sorted(d.task_id for d in spec.tasks if task.task_id in d.upstream)
        for try_number in range(1, task.retries + 2):
            assignment = Assignment(
                key=self.task_key(spec.dag_id, self.run_id, instance_id),
                token=0,
                try_number=try_number,
                kind=task.kind,
                command=task.command or "",
                env=task.env,
                callable_name=task.callable_name or "",
                kwargs=json.loads(task.kwargs_json or "{}"),
                fileloc=spec.fileloc,
                execution_timeout=task.execution_timeout_seconds,
                logical_date=self.logical.astimezone(UTC).isoformat(),
                data_interval_start=self.start.astimezone(UTC).isoformat(),
                data_interval_end=self.end.astimezone(UTC).isoformat(),
                conf=self.conf,
                params_json=spec.params_json,  # the Attempt renders its templates with them
                upstream_results=ups,
                skip_on_exit_code=getattr(task, "skip_on_exit_code", None),
            )
            try:  # declared variables/connections: from this shell's environment only
                assignment = with_secrets(None, "dags-test", assignment)
            except RaftschedError:
                raise RaftschedError(
                    f"task {task.task_id} declares variables or connections that this shell"
                    " does not define: export RAFTSCHED_SECRET_VAR_<NAME> /"
                    " RAFTSCHED_SECRET_CONN_<ID> for each (dags test never asks a cluster)"
                ) from None
            print(f"--- {instance_id}: try {try_number} of {task.retries + 1}", flush=True)
            began = time.monotonic()
            outcome = Attempt(assignment, _printer(instance_id)).run()
            took = time.monotonic() - began
            strangers = sorted(set(outcome.follow or ()) - set(downstream))
            if outcome.success and strangers:  # as the cluster: the attempt fails
                outcome = replace(
                    outcome,
                    success=False,
                    message=f"branch to {strangers}: not directly downstream",
                )
            if outcome.success and getattr(task, "trigger_dagrun", False):
                outcome = _trigger_here(outcome)
            dags_test_callbacks.task_callbacks(spec, task, self.context, try_number, outcome)
            if outcome.success:
                state = "skipped" if outcome.skipped else "success"
                print(f"--- {instance_id}: {state} in {took:.2f}s", flush=True)
                if outcome.result_json:
                    print(f"--- {instance_id}: xcom {outcome.result_json}", flush=True)
                return state, outcome
            print(f"--- {instance_id}: failed in {took:.2f}s: {outcome.message}", flush=True)
        return "failed", outcome


def _trigger_here(outcome: Any) -> Any:
    """A TriggerDagRunOperator's outcome in `dags test`: its target must be a DAG of the
    folder (else it fails, as on a cluster); the run is not created (this tests one DAG)."""
    from raftsched.core.dagrun_trigger import request_of

    req = request_of(outcome.result_json or "")
    if isinstance(req, str) or req["dag_id"] not in _KNOWN_DAGS:
        why = req if isinstance(req, str) else f"no DAG {req['dag_id']!r} in the DAGs folder"
        return replace(outcome, success=False, message=why)
    print(f"--- would trigger DAG {req['dag_id']!r} (dags test runs one DAG, creates no run)")
    if req["reset"]:
        print("--- (reset_dag_run: on a cluster, an existing run would be cleared to run again)")
    if req["wait"] is not None:
        states = " or ".join(req["wait"]["allowed"])
        print(f"--- (wait_for_completion: on a cluster, the task would wait for {states})")
    return outcome


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _in_order(tasks: Any) -> list[Any]:
    """The tasks in dependency order (upstream first; ties by task_id)."""
    by_id = {task.task_id: task for task in tasks}
    done: set[str] = set()
    order = []
    while len(order) < len(by_id):
        ready = sorted(
            t for t, task in by_id.items() if t not in done and set(task.upstream) <= done
        )
        if not ready:  # the parser refuses cycles; never loop forever on one
            raise RaftschedError("the DAG's tasks form a cycle")
        for task_id in ready:
            order.append(by_id[task_id])
            done.add(task_id)
    return order


def _printer(task_id: str) -> Any:
    def sink(stream: str, text: str) -> None:
        out = sys.stderr if stream == "stderr" else sys.stdout
        for line in text.splitlines():
            print(f"[{task_id}] {line}", file=out, flush=True)

    return sink
