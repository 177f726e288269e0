"""`raftsched dags parse` and `raftsched dags next`: the local subcommands (no cluster needed).

``parse`` checks a DAGs folder the way the scheduler would; ``next`` previews a DAG's next
slots (in UTC and in its own time zone). :mod:`raftsched.cli.dags_cmd` registers them.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from raftsched.cli.output import emit
from raftsched.errors import DagNotFound, RaftschedError

# -- dags parse ---------------------------------------------------------------------------


def _parse(args: argparse.Namespace, folder_arg: str | None) -> Any:
    """Parse ``folder_arg`` (default: ``[core] dags_folder``) as the scheduler would.

    The config is read as by every other command (``--config``, ``$RAFTSCHED_CONFIG``,
    ``$RAFTSCHED_HOME/raftsched.cfg``, ``RAFTSCHED__*``) even when a folder is given: its parse
    timeout, output cap and ``catchup_by_default`` change what a file yields, and a bad key
    must stop this command as it stops a node.
    """
    from raftsched.config import load_config
    from raftsched.dags import mapping as dag_mapping
    from raftsched.dags.parser import configure_airflow, parse_folder

    config = load_config(getattr(args, "config", None))
    core = config.core
    folder = Path(folder_arg) if folder_arg else Path(core.dags_folder)
    configure_airflow(
        imports=core.airflow_imports,
        create_cron_data_intervals=config.scheduler.create_cron_data_intervals,
    )
    dag_mapping.configure(core.max_map_length)
    if core.airflow_imports:  # `dags test` runs the tasks in processes of its own
        from raftsched import taskenv
        from raftsched.airflow._imports import enable_for_tasks

        taskenv.configure(enable_for_tasks(tuple(config.worker.task_env_allowlist)))
    try:
        return parse_folder(
            folder,
            timeout=core.dag_file_timeout,
            output_limit=core.dag_file_output_limit,
            catchup_by_default=config.scheduler.catchup_by_default,
        )
    except FileNotFoundError as err:
        raise RaftschedError(str(err)) from None


def cmd_parse(args: argparse.Namespace) -> int:
    result = _parse(args, args.folder)
    if args.output == "json":
        payload = result.to_dict()
        del payload["empty_files"]
        emit(payload, output="json")
        return 1 if result.errors else 0
    rows = [
        {
            "dag_id": spec.dag_id,
            "schedule": spec.schedule.display,
            "timezone": spec.timezone,
            "tasks": len(spec.tasks),
            "file": spec.fileloc,
            "hash": spec.spec_hash[:12],
        }
        for spec in result.specs
    ]
    emit(rows, output="table", columns=("dag_id", "schedule", "timezone", "tasks", "file", "hash"))
    if result.errors:
        print(f"\n{len(result.errors)} file(s) failed to import:")
        emit(
            [{"file": e.fileloc, "message": e.message} for e in result.errors],
            output="table",
            columns=("file", "message"),
        )
    for path in result.empty_files:
        print(f"note: {path} defines no DAG")
    return 1 if result.errors else 0


# -- dags next ----------------------------------------------------------------------------


def _parse_after(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise RaftschedError(
            f"--after {text!r} is not an ISO-8601 time, e.g. 2024-10-27T00:00:00+02:00"
        ) from None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


def cmd_next(args: argparse.Namespace) -> int:
    from raftsched.core.timetable import timetable_for

    if args.n < 1:
        raise RaftschedError(f"-n must be 1 or more, got {args.n}")
    after = _parse_after(args.after)
    result = _parse(args, args.folder)
    spec = next((s for s in result.specs if s.dag_id == args.dag_id), None)
    if spec is None:
        failing = "".join(f"\n  {e.fileloc}: {e.message}" for e in result.errors)
        if failing:
            raise RaftschedError(f"DAG {args.dag_id!r} not found; files that failed:{failing}")
        raise DagNotFound(args.dag_id)
    zone = ZoneInfo(spec.timezone)
    timetable = timetable_for(spec)
    slots = []
    slot = timetable.next_slot(after)
    while slot is not None and len(slots) < args.n:
        slots.append(slot)
        slot = timetable.next_slot(slot.logical_date)

    def iso(value: datetime, tz: Any = UTC) -> str:
        return value.astimezone(tz).isoformat()

    items = [
        {
            "logical_date": iso(s.logical_date),
            "logical_date_local": iso(s.logical_date, zone),
            "data_interval_start": iso(s.data_interval_start),
            "data_interval_end": iso(s.data_interval_end),
            "data_interval_start_local": iso(s.data_interval_start, zone),
            "data_interval_end_local": iso(s.data_interval_end, zone),
        }
        for s in slots
    ]
    payload = {
        "dag_id": spec.dag_id,
        "schedule": spec.schedule.display,
        "timezone": spec.timezone,
        "after": iso(after),
        "slots": items,
    }
    if args.output == "json":
        emit(payload, output="json")
        return 0
    print(f"{spec.dag_id}: schedule {spec.schedule.display}, time zone {spec.timezone}")
    rows = [
        {
            "logical_date": item["logical_date"],
            "local": item["logical_date_local"],
            "interval_start": item["data_interval_start"],
            "interval_end": item["data_interval_end"],
        }
        for item in items
    ]
    emit(rows, output="table", columns=("logical_date", "local", "interval_start", "interval_end"))
    if not items:
        print("no further scheduled slots")
    return 0
