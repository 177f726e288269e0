"""An attempt's XCom on the worker: its arguments in, its result file out (TaskFlow).

- :func:`with_upstream_results`: a Python attempt's kwargs with each XCom placeholder
  replaced by the upstream return value its lease carries (after templates are rendered).
- :func:`result_env`: where the attempt writes its result file (``RAFTSCHED_RESULT_FILE``,
  in its working directory, removed with it).
- :func:`settle_outcome`: the outcome with what the result file says (return value, branch
  choice, skipped, the extras of its outlets' asset events), bounded; a bash exit code
  equal to ``skip_on_exit_code`` ends SKIPPED.
  The return value, the extras and the message are masked (``raftsched.masking``) with the attempt's
  secret values: what leaves the worker goes into the Raft log, snapshots, the DB row, the
  task page and the API, forever, and to downstream tasks as their arguments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from raftsched import masking
from raftsched.core.asset_condition import check_outlet_extras
from raftsched.core.xcom import TASKFLOW_PREFIX, check_result_json
from raftsched.dags import xcom_args
from raftsched.dags.deferral import RESUME_KEY
from raftsched.errors import LimitExceeded, XComError
from raftsched.worker.task_secrets import masked_values
from raftsched.worker.transport import Assignment

if TYPE_CHECKING:
    from raftsched.worker.runner import Outcome


def with_upstream_results(a: Assignment) -> Assignment:
    """Raises XComError when an argument names an item the value lacks."""
    if a.kind != "python" or not (a.kwargs or a.resume_json):
        return a
    kwargs = xcom_args.resolve(dict(a.kwargs), a.upstream_results)
    if a.resume_json:  # after the templates: the event is data, never a template
        kwargs[RESUME_KEY] = json.loads(a.resume_json)
    return replace(a, kwargs=kwargs)


def result_path(workdir: str) -> str:
    return os.path.join(workdir, xcom_args.RESULT_FILE_NAME)


def result_env(a: Assignment, workdir: str) -> dict[str, str]:
    return {xcom_args.RESULT_FILE_ENV: result_path(workdir)} if a.kind == "python" else {}


def settle_outcome(
    outcome: Outcome, a: Assignment, workdir: str, read: Sequence[str] = ()
) -> Outcome:
    """The outcome as it leaves the worker: with the result file's return value, and with
    each secret value the attempt was given (``read``: on demand) masked in that value and in
    the message."""
    settled = _settle(outcome, a, workdir)
    values = masked_values(a) + list(read)
    if not values:
        return settled
    try:  # checked again: a number masked as "***" may have grown it past the bound
        result_json = check_result_json(
            "the masked return value", masking.mask_json(settled.result_json, values)
        )
    except ValueError as err:  # never a value in the message: LimitExceeded names sizes
        message = f"the return value cannot be kept once masked: {err}"
        # as for any value past a bound: a TaskFlow attempt fails, a classic one keeps none
        failed = a.callable_name.startswith(TASKFLOW_PREFIX)
        return replace(
            settled, success=settled.success and not failed, result_json="", message=message
        )
    extras = _masked_extras(settled.outlet_extras, values)
    if isinstance(extras, str):
        return replace(settled, success=False, result_json="", outlet_extras=(), message=extras)
    return replace(
        settled,
        result_json=result_json,
        message=masking.mask_text(settled.message, values),
        outlet_extras=extras,
    )


def _masked_extras(
    extras: tuple[tuple[str, str], ...], values: list[str]
) -> tuple[tuple[str, str], ...] | str:
    """The outlet extras with the secret values masked (as the return value is: an asset
    event is kept and shown, and reaches consumer tasks), or why they cannot be kept."""
    if not extras:
        return extras
    masked = tuple((uri, masking.mask_json(extra, values)) for uri, extra in extras)
    try:  # checked again: masking may grow them past a bound
        return check_outlet_extras("the masked outlet extras", masked)
    except LimitExceeded as err:  # names sizes, never a value
        return f"the outlet extras cannot be kept once masked: {err}"


def _settle(outcome: Outcome, a: Assignment, workdir: str) -> Outcome:
    if outcome.killed:
        return outcome
    code = a.skip_on_exit_code
    if a.kind == "bash" and code is not None and outcome.exit_code == code and code != 0:
        return replace(outcome, success=True, skipped=True, message=f"skipped: exit code {code}")
    if a.kind != "python" or not outcome.success:
        return outcome
    try:
        text, follow, skipped = xcom_args.read_result(result_path(workdir))
    except XComError as err:
        return replace(outcome, success=False, message=str(err))
    if skipped:
        return replace(outcome, skipped=True, message="skipped by the task (TaskSkipped)")
    try:
        defer = xcom_args.read_deferral(result_path(workdir))
    except XComError as err:
        return replace(outcome, success=False, message=str(err))
    if defer is not None:
        return replace(outcome, defer=defer, message=f"deferred on a {defer['kind']} trigger")
    try:
        extras = xcom_args.read_outlet_extras(result_path(workdir))
    except XComError as err:
        return replace(outcome, success=False, message=str(err))
    return replace(outcome, result_json=text, follow=follow, outlet_extras=extras)
