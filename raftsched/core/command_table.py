"""Which function applies which command: the one table ``SchedulerState.apply`` dispatches on.

A command type missing here is answered UNKNOWN_COMMAND and changes nothing (a newer
release's command reaching an older node). Each handler module owns its concept's commands
and lists them in its own ``HANDLERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import handlers_assets, secret_reads
from raftsched.core import handlers_callbacks as hc
from raftsched.core import handlers_dags as hd
from raftsched.core import handlers_marks as hm
from raftsched.core import handlers_pools as hp
from raftsched.core import handlers_runs as hr
from raftsched.core import handlers_secrets as hs
from raftsched.core import handlers_tasks as ht
from raftsched.core import handlers_triggers as htr
from raftsched.core import run_timeout as rt
from raftsched.core import versions as vs
from raftsched.core.results import Result

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def _apply_batch(state: SchedulerState, cmd: c.Batch, now: datetime, index: int) -> Result:
    results = tuple(state._apply(sub, index) for sub in cmd.commands)
    failed = next((res.reason for res in results if not res.ok), "")
    return Result(not failed, failed, results)


HANDLERS: dict[type, Callable[[SchedulerState, Any, datetime, int], Result]] = {
    c.RegisterDags: hd.apply_register_dags,
    c.RemoveDags: hd.apply_remove_dags,
    c.SetImportErrors: hd.apply_set_import_errors,
    c.SetPaused: hd.apply_set_paused,
    c.CreateRuns: hr.apply_create_runs,
    c.QueueTasks: ht.apply_queue_tasks,
    c.LeaseTasks: ht.apply_lease_tasks,
    c.HeartbeatLeases: ht.apply_heartbeat_leases,
    c.CompleteAttempt: ht.apply_complete_attempt,
    c.ReleaseLeases: ht.apply_release_leases,
    c.ExpireLeases: ht.apply_expire_leases,
    c.AppendLogs: ht.apply_append_logs,
    c.ClearTasks: hm.apply_clear_tasks,
    c.MarkTasks: hm.apply_mark_tasks,
    c.AckMaterialized: hr.apply_ack_materialized,
    c.SetSecret: hs.apply_set_secret,
    c.DeleteSecret: hs.apply_delete_secret,
    c.Batch: _apply_batch,
    **hc.HANDLERS,
    **htr.HANDLERS,
    **hp.HANDLERS,
    **rt.HANDLERS,
    **secret_reads.HANDLERS,
    **handlers_assets.HANDLERS,
    c.SetClusterVersion: vs.apply_set_cluster_version,
}
