"""marshmallow schemas of the REST API: they parse and bound the input, shape the output, and
are what flask-smorest turns into the OpenAPI document's components."""

from __future__ import annotations

from datetime import UTC

from marshmallow import Schema, fields, validate
from raftsched.web.api.task_schemas import Task

from raftsched.core import limits

MAX_PAGE_SIZE = 1000  # the cluster's own bound (ListDags, ListRuns)
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_TOKEN_CHARS = 1024
MAX_LOG_CHUNKS = 5000
MAX_FOLLOW_SECONDS = 25.0  # below nginx's proxy_read_timeout (30 s): resume with after_seq
RUN_STATES = ("queued", "running", "success", "failed")
MARK_STATES = ("success", "failed")

_ID = validate.Length(min=1, max=limits.MAX_ID_CHARS)


class Page(Schema):
    page_size = fields.Integer(
        load_default=DEFAULT_PAGE_SIZE,
        validate=validate.Range(1, MAX_PAGE_SIZE),
        metadata={"description": f"items per page (1..{MAX_PAGE_SIZE})"},
    )
    page_token = fields.String(
        load_default="",
        validate=validate.Length(max=MAX_PAGE_TOKEN_CHARS),
        metadata={"description": "next_page_token of the previous page; empty: the first"},
    )


class DagListQuery(Page):
    search = fields.String(
        load_default="",
        validate=validate.Length(max=limits.MAX_ID_CHARS),
        metadata={"description": "case-insensitive substring of dag_id or description"},
    )
    paused = fields.Boolean(
        load_default=None, allow_none=True, metadata={"description": "only paused / active"}
    )
    recent_runs = fields.Integer(load_default=10, validate=validate.Range(0, 100))


class ExplainQuery(Schema):
    at = fields.AwareDateTime(
        load_default=None,
        default_timezone=UTC,
        metadata={"description": "the slot at or before this time; default now"},
    )


class Explanation(Schema):
    verdict = fields.String(metadata={"description": "created, skipped, paused, waiting, ..."})
    detail = fields.String()
    slot = fields.DateTime(allow_none=True)
    run_id = fields.String()
    history_from = fields.DateTime(
        allow_none=True, metadata={"description": "the DB's oldest run of the DAG"}
    )


class RunListQuery(Page):
    dag_id = fields.String(load_default="", validate=validate.Length(max=limits.MAX_ID_CHARS))
    state = fields.List(
        fields.String(validate=validate.OneOf(RUN_STATES)),
        load_default=list,
        metadata={"description": "only runs in these states (repeat the parameter)"},
    )


class DagRunListQuery(Page):
    state = fields.List(fields.String(validate=validate.OneOf(RUN_STATES)), load_default=list)


class LogQuery(Schema):
    try_number = fields.Integer(
        load_default=0,
        validate=validate.Range(0, limits.MAX_TRY_NUMBER),
        metadata={"description": "the attempt (1-based); 0: the latest"},
    )
    after_seq = fields.Integer(
        load_default=0,
        validate=validate.Range(0, limits.MAX_JSON_INT),
        metadata={"description": "only chunks with seq > after_seq"},
    )
    limit = fields.Integer(load_default=500, validate=validate.Range(1, MAX_LOG_CHUNKS))
    follow = fields.Boolean(
        load_default=False,
        metadata={
            "description": "stream application/x-ndjson: one chunk per line as the attempt"
            ' writes it, then one {"end": true, ...} line'
        },
    )
    timeout = fields.Float(
        load_default=20.0,
        validate=validate.Range(0.5, MAX_FOLLOW_SECONDS),
        metadata={"description": "follow: seconds before the stream ends (resume with after_seq)"},
    )


# -- bodies ----------------------------------------------------------------------------------


class _Strict(Schema):
    class Meta:
        unknown = "raise"  # a misspelt field is an error, not silently ignored


class TriggerBody(_Strict):
    conf = fields.Dict(
        keys=fields.String(),
        load_default=dict,
        metadata={
            "description": f"the run's conf, a JSON object (at most {limits.MAX_CONF_BYTES} bytes)"
        },
    )
    run_id = fields.String(load_default="", validate=validate.Length(max=limits.MAX_ID_CHARS))
    logical_date = fields.AwareDateTime(
        load_default=None,
        allow_none=True,
        default_timezone=UTC,
        metadata={"description": "default: now"},
    )


class PauseBody(_Strict):
    note = fields.String(
        load_default="",
        validate=validate.Length(max=limits.MAX_PAUSE_NOTE_CHARS),
        metadata={"description": "why it is paused"},
    )


class BackfillBody(_Strict):
    start_date = fields.AwareDateTime(required=True, default_timezone=UTC)
    end_date = fields.AwareDateTime(required=True, default_timezone=UTC)
    conf = fields.Dict(keys=fields.String(), load_default=dict)
    dry_run = fields.Boolean(load_default=False)


class ClearBody(_Strict):
    task_ids = fields.List(
        fields.String(validate=_ID),
        load_default=list,
        validate=validate.Length(max=limits.MAX_TASKS_PER_DAG),
        metadata={"description": "tasks to rerun; empty: every task of the run"},
    )
    include_downstream = fields.Boolean(load_default=False)


class MarkBody(_Strict):
    task_ids = fields.List(
        fields.String(validate=_ID),
        required=True,
        validate=validate.Length(min=1, max=limits.MAX_TASKS_PER_DAG),
    )
    state = fields.String(required=True, validate=validate.OneOf(MARK_STATES))


# -- answers ---------------------------------------------------------------------------------


class NextRun(Schema):
    logical_date = fields.DateTime(allow_none=True)
    data_interval_end = fields.DateTime(allow_none=True)


class RecentRun(Schema):
    run_id = fields.String()
    state = fields.String()
    logical_date = fields.DateTime(allow_none=True)
    run_type = fields.String()


class SkippedSlots(Schema):
    first = fields.DateTime(metadata={"description": "logical date of the first slot"})
    last = fields.DateTime(metadata={"description": "logical date of the last slot"})
    count = fields.Integer(metadata={"description": "0: not counted"})
    reason = fields.String(
        metadata={
            "description": "overlap, buffer_full, catchup, catchup_window, not_parsed, paused,"
            " leader_unavailable"
        }
    )
    decided_at = fields.DateTime()


class Dag(Schema):
    dag_id = fields.String()
    fileloc = fields.String()
    description = fields.String()
    tags = fields.List(fields.String())
    schedule = fields.String(metadata={"description": 'as written ("@daily"), or "manual only"'})
    schedule_kind = fields.String()
    manual_only = fields.Boolean()
    timezone = fields.String()
    start_date = fields.DateTime(allow_none=True)
    end_date = fields.DateTime(allow_none=True)
    catchup = fields.Boolean()
    max_active_runs = fields.Integer()
    max_active_tasks = fields.Integer()
    paused = fields.Boolean()
    active = fields.Boolean()
    updated_at = fields.DateTime(allow_none=True)
    last_logical_date = fields.DateTime(allow_none=True)
    next_run = fields.Nested(NextRun, allow_none=True)
    recent_runs = fields.List(fields.Nested(RecentRun))
    task_count = fields.Integer()
    overlap = fields.String(metadata={"description": "allow_all, skip, buffer_one, ... (README)"})
    catchup_window_seconds = fields.Float(allow_none=True)
    max_runs = fields.Integer(allow_none=True)
    scheduled_runs = fields.Integer(metadata={"description": "made so far under max_runs"})
    jitter_seconds = fields.Float()
    pause_on_failure = fields.Boolean()
    pause_note = fields.String(metadata={"description": "why it is paused"})
    skipped = fields.List(fields.Nested(SkippedSlots))


class DagDetail(Dag):
    tasks = fields.List(fields.Nested(Task))


class DagList(Schema):
    dags = fields.List(fields.Nested(Dag))
    next_page_token = fields.String(metadata={"description": "empty on the last page"})
    total_size = fields.Integer()


class PauseResult(Schema):
    dag = fields.Nested(Dag)
    changed = fields.Boolean(metadata={"description": "false: it already was in that state"})


class Run(Schema):
    dag_id = fields.String()
    run_id = fields.String()
    logical_date = fields.DateTime(allow_none=True)
    data_interval_start = fields.DateTime(allow_none=True)
    data_interval_end = fields.DateTime(allow_none=True)
    run_type = fields.String()
    state = fields.String()
    conf = fields.Dict()
    created_at = fields.DateTime(allow_none=True)
    start_date = fields.DateTime(allow_none=True)
    end_date = fields.DateTime(allow_none=True)


class RunList(Schema):
    runs = fields.List(fields.Nested(Run))
    next_page_token = fields.String()


class BackfillResult(Schema):
    runs = fields.List(fields.Nested(Run))
    skipped = fields.List(fields.DateTime(), metadata={"description": "slots that had a run"})


class TaskInstance(Schema):
    task_id = fields.String()
    state = fields.String()
    try_number = fields.Integer()
    max_tries = fields.Integer()
    worker_id = fields.String()
    lease_token = fields.Integer()
    queued_at = fields.DateTime(allow_none=True)
    start_date = fields.DateTime(allow_none=True)
    end_date = fields.DateTime(allow_none=True)
    next_retry_at = fields.DateTime(allow_none=True)
    exit_code = fields.Integer(allow_none=True)
    message = fields.String()
    lease_expires_at = fields.DateTime(allow_none=True)
    result_json = fields.String(
        metadata={"description": "its return value (XCom) as JSON text; empty: none"}
    )
    queue = fields.String(metadata={"description": "only workers serving this queue lease it"})
    waiting = fields.String(
        metadata={
            "description": "while queued, why it may wait (no live worker serves its queue);"
            " empty: nothing known"
        }
    )
    map_index = fields.Integer(
        allow_none=True,
        metadata={"description": "an instance of a mapped task: its index (task_id TASK[INDEX])"},
    )
    map_count = fields.Integer(
        metadata={"description": "a mapped task once expanded: its instances; 0: not mapped"}
    )


class TaskInstanceList(Schema):
    run = fields.Nested(Run)
    task_instances = fields.List(fields.Nested(TaskInstance))
    next_page_token = fields.String()


class ClearResult(Schema):
    cleared_task_ids = fields.List(fields.String())


class MarkResult(Schema):
    marked_task_ids = fields.List(fields.String())


class LogChunk(Schema):
    seq = fields.Integer()
    try_number = fields.Integer()
    stream = fields.String()
    text = fields.String()
    created_at = fields.DateTime(allow_none=True)


class LogPage(Schema):
    chunks = fields.List(fields.Nested(LogChunk))
    last_seq = fields.Integer(metadata={"description": "pass it as after_seq for what follows"})
    more = fields.Boolean(metadata={"description": "the limit cut the answer: ask again"})


class ImportErrorItem(Schema):
    fileloc = fields.String()
    message = fields.String()
    traceback = fields.String()


class ImportErrorList(Schema):
    import_errors = fields.List(fields.Nested(ImportErrorItem))
    next_page_token = fields.String()


class Node(Schema):
    node_id = fields.String()
    address = fields.String()
    api_address = fields.String()
    role = fields.String()
    term = fields.Integer()
    commit_index = fields.Integer()
    applied_index = fields.Integer()
    lag = fields.Integer()
    digest = fields.String()
    digest_index = fields.Integer()
    outbox_backlog = fields.Integer()
    db_watermark = fields.Integer(allow_none=True)
    db_ok = fields.Boolean(allow_none=True)
    quarantined = fields.Boolean(allow_none=True)
    backpressure = fields.Boolean()
    has_quorum = fields.Boolean()
    last_leader_contact = fields.DateTime(allow_none=True)
    error = fields.String()


class ClusterStatus(Schema):
    leader = fields.String(allow_none=True)
    nodes = fields.List(fields.Nested(Node))
    db_watermark = fields.Integer(allow_none=True)
    db_ok = fields.Boolean(allow_none=True)
    outbox_backlog = fields.Integer(allow_none=True)
    backpressure = fields.Boolean()
    newest_heartbeat = fields.DateTime(allow_none=True)
    answered_by = fields.String()
    applied_index = fields.Integer()


class Health(Schema):
    status = fields.String(metadata={"description": '"ok" or "unavailable"'})
    leader = fields.String(allow_none=True)
    newest_heartbeat = fields.DateTime(allow_none=True)
    error = fields.String()
    version = fields.String(metadata={"description": "this webserver's raftsched version"})


class ApiError(Schema):
    """Every error answer."""

    code = fields.String(
        metadata={"description": "gRPC status name: NOT_FOUND, INVALID_ARGUMENT, ..."}
    )
    message = fields.String()
    field = fields.String(metadata={"description": "the request field to blame, if one"})
    fields_ = fields.Dict(
        data_key="fields",
        keys=fields.String(),
        values=fields.List(fields.String()),
        metadata={"description": "every invalid field and why"},
    )
