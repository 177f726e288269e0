"""A trigger's conf against the DAG's params, checked in the API before anything is proposed
(TriggerDag; BackfillDag checks the spec it plans from). See :mod:`raftsched.dags.params`."""

from __future__ import annotations

from typing import Any

from raftsched.api.servicers.context import ApiContext
from raftsched.dags import params as dag_params


def check_trigger_params(ctx: ApiContext, dag_id: str, conf: dict[str, Any], context: Any) -> None:
    """Refuse a conf that breaks one of the DAG's params (LimitExceeded: INVALID_ARGUMENT
    naming the param and what it expects). An unknown DAG is left to apply (UNKNOWN_DAG)."""

    def params_of(state: Any) -> str | None:
        record = state.dag(dag_id)
        return None if record is None else record.spec.params_json

    params_json, _ = ctx.read(params_of)
    if params_json is None:  # this replica may lag: decide from committed state
        ctx.read_index(context)
        params_json, _ = ctx.read(params_of)
    if params_json:
        dag_params.check_conf(params_json, conf)
