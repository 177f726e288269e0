"""Triggers that need the cluster's help, under their own lease (docs/architecture.md §17):

- ``sql``: a query returns a row (``raftsched.dags.sql_check``), on the database of a
  connection the deferred task declares. The triggerer looks the connection up in its own
  environment first (``RAFTSCHED_SECRET_CONN_<ID>``, ``AIRFLOW_CONN_<ID>``, as a worker
  does), then asks the cluster (``SecretService.ResolveSecrets`` with the trigger's key and
  token: the node checks that this triggerer holds that trigger's live lease and that the
  task declares the connection). The URI is kept in memory for the trigger's life only.
- ``external``: another DAG's run at a logical date reached a state
  (``WorkerService.ExternalRunState``, also checked against the trigger's lease); it raises
  once the run, or a task waited on, is in a failed state, so the waiting task fails.

Each blocking call runs on the loop's thread pool; a call that fails (a node restarting, the
DB briefly away) is retried at the next poll, never a reason to stop the trigger.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, Protocol

from raftsched import airflow_secrets as af
from raftsched import secrets as sx
from raftsched.dags.deferral import MIN_POKE_INTERVAL
from raftsched.dags.sql_check import first_row, row_done
from raftsched.errors import TriggerError

log = logging.getLogger("raftsched.triggerer")

_BACKENDS: tuple[sx.SecretsBackend, ...] = (sx.EnvSecretsBackend(), af.AirflowEnvSecretsBackend())


class ClusterHelp(Protocol):
    """What a trigger of this module may ask, bound to its own lease (``loop._Help``)."""

    def connection(self, conn_id: str) -> str: ...

    def external_state(
        self, dag_id: str, logical_date: datetime, task_ids: list[str]
    ) -> tuple[bool, str, list[str]]: ...


def local_connection(conn_id: str) -> str | None:
    """The connection's URI from the triggerer's own environment, or None."""
    for backend in _BACKENDS:
        value = backend.get(sx.CONNECTION, conn_id)
        if value is not None:
            return af.connection_uri(conn_id, value)
    return None


def _interval(args: dict[str, Any], default: float) -> float:
    return max(MIN_POKE_INTERVAL, float(args.get("poke_interval", default)))


async def sql_trigger(args: dict[str, Any], help: ClusterHelp) -> Any:
    conn_id, sql = sx.check_key(str(args["conn_id"])), str(args["sql"])
    parameters = args.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise TriggerError("a sql trigger's parameters must be a JSON object")
    truthy, interval = bool(args.get("first_cell_truthy", False)), _interval(args, 5.0)
    uri = local_connection(conn_id) or await asyncio.to_thread(help.connection, conn_id)
    while True:
        try:
            row = await asyncio.to_thread(first_row, uri, sql, parameters)
        except Exception as err:  # its text goes to the task's log: no credential in it
            text = sx.mask_text(f"{type(err).__name__}: {err}", sx.mask_values(sx.CONNECTION, uri))
            raise TriggerError(f"the SQL check on connection {conn_id} failed: {text}") from None
        if row_done(row, first_cell_truthy=truthy):
            return {"row": row}
        await asyncio.sleep(interval)


async def external_trigger(args: dict[str, Any], help: ClusterHelp) -> Any:
    dag_id = str(args["dag_id"])
    logical = datetime.fromisoformat(str(args["logical_date"]))
    if logical.tzinfo is None:
        raise TriggerError("an external trigger's logical_date needs a time zone")
    task_ids = [str(t) for t in args.get("task_ids") or []]
    allowed = {str(s).lower() for s in args.get("allowed_states") or ["success"]}
    failed = {str(s).lower() for s in args.get("failed_states") or []}
    skipped = {str(s).lower() for s in args.get("skipped_states") or []}
    interval = _interval(args, 5.0)
    while True:
        try:
            found, run_state, states = await asyncio.to_thread(
                help.external_state, dag_id, logical, task_ids
            )
        except TriggerError:
            raise
        except Exception as err:  # the cluster is briefly away: ask again at the next poll
            log.info("ExternalRunState for %s failed: %s; asking again", dag_id, err)
            found, run_state, states = False, "", []
        if found:
            watched = states if task_ids else [run_state]
            bad = [s for s in watched if s in failed]
            if bad:
                what = dict(zip(task_ids, states, strict=True)) if task_ids else run_state
                raise TriggerError(
                    f"{dag_id} at {logical.isoformat()} reached a failed state: {what}"
                )
            if watched and any(s in skipped for s in watched):
                return {"state": run_state, "outcome": "__skipped__"}
            if watched and all(s in allowed for s in watched):
                return {"state": run_state, "states": dict(zip(task_ids, states, strict=True))}
        await asyncio.sleep(interval)


WITH_HELP = {"sql": sql_trigger, "external": external_trigger}
