"""Airflow's ``SqlSensor`` over deferral (docs/architecture.md §17): waits until a query's
first row has a truthy first cell (``success``/``failure`` callables decide instead, when
given), on a raftsched connection.

``conn_id`` is declared for the task (``connections=``), so a poking attempt reads the URI from
its environment as any task does, and a triggerer running its ``sql`` trigger fetches it
under the trigger's lease. ``deferrable=True``: the triggerer polls, no slot is held; when it
fires, the resumed attempt checks once more with the callables (a ``success`` that says no
defers again). ``fail_on_empty``: no row fails the task (at the first poke on a worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftsched.airflow._sensors import BaseSensorOperator
from raftsched.airflow.exceptions import AirflowException
from raftsched.dags.deferral import BaseTrigger, SqlTrigger
from raftsched.dags.sql_check import check_sql, first_row, row_done
from raftsched.errors import DagDefinitionError
from raftsched.secrets import check_key, get_connection


class SqlSensor(BaseSensorOperator):
    def __init__(
        self,
        *,
        conn_id: str,
        sql: str,
        parameters: dict[str, Any] | None = None,
        success: Callable[[Any], Any] | None = None,
        failure: Callable[[Any], Any] | None = None,
        fail_on_empty: bool = False,
        **kwargs: Any,
    ) -> None:
        try:
            self.conn_id, self.sql = check_key(conn_id), check_sql(sql)
        except ValueError as err:
            raise DagDefinitionError(f"SqlSensor {kwargs.get('task_id')!r}: {err}") from None
        self.parameters = dict(parameters or {})
        self.success, self.failure, self.fail_on_empty = success, failure, bool(fail_on_empty)
        declared = list(kwargs.pop("connections", None) or [])
        kwargs["connections"] = sorted({*declared, self.conn_id})
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {"conn_id": self.conn_id, "sql": self.sql, "parameters": self.parameters}

    def poke(self, args: dict[str, Any]) -> bool:
        uri = get_connection(args["conn_id"]).uri
        row = first_row(uri, args["sql"], args.get("parameters"))
        if row is None:
            if self.fail_on_empty:
                raise AirflowException("no row returned by the SqlSensor's query")
            return False
        first = row[0] if row else None
        if self.failure is not None and self.failure(first):
            raise AirflowException(f"SqlSensor's failure criteria met by {first!r}")
        if self.success is not None:
            return bool(self.success(first))
        return row_done(row, first_cell_truthy=True)

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        callables = self.success is not None or self.failure is not None
        return SqlTrigger(
            args["conn_id"],
            args["sql"],
            args.get("parameters") or {},
            poke_interval=interval,
            first_cell_truthy=not callables,  # with callables: any row, they decide
        )

    def _run(self, sensor: dict[str, Any], event: Any = None, deadline: str = "") -> Any:
        if event is not None and not deadline and self.success is None and self.failure is None:
            return event  # the trigger checked what poke would
        return super()._run(sensor, None, deadline)  # poke once more, or defer again
