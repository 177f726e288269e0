"""Schemas of ``GET /api/v1/workers`` (the workers page's data, ``raftsched.web.workers``) and
``GET /api/v1/audit`` (the audit page's, ``raftsched.web.audit``)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate


class WorkerAttempt(Schema):
    dag_id = fields.String()
    run_id = fields.String()
    task_id = fields.String()
    try_number = fields.Integer()
    start_date = fields.DateTime(allow_none=True)


class Worker(Schema):
    worker_id = fields.String()
    host = fields.String(allow_none=True, metadata={"description": "null: it did not say"})
    pid = fields.Integer(allow_none=True)
    version = fields.String(allow_none=True)
    queues = fields.List(fields.String(), metadata={"description": "empty: the default queue"})
    slots_used = fields.Integer(metadata={"description": "attempts leased to it now"})
    slots_total = fields.Integer(allow_none=True, metadata={"description": "its concurrency"})
    running = fields.List(fields.Nested(WorkerAttempt))
    last_seen = fields.DateTime(allow_none=True, metadata={"description": "its last call"})
    lost_at = fields.DateTime(allow_none=True, metadata={"description": "lost ones: when"})
    lost_reason = fields.String(allow_none=True, metadata={"description": "lost ones: why"})


class WorkerList(Schema):
    workers = fields.List(fields.Nested(Worker), metadata={"description": "live, by id"})
    lost = fields.List(
        fields.Nested(Worker), metadata={"description": "lost in the last 10 minutes, latest first"}
    )
    answered_by = fields.String()


class AuditQuery(Schema):
    dag_id = fields.String(load_default="", validate=validate.Length(max=250))
    actor = fields.String(
        load_default="",
        validate=validate.Length(max=200),
        metadata={"description": "a token's name, or a web user's name"},
    )
    before_id = fields.Integer(load_default=0, validate=validate.Range(min=0, max=2**62))
    limit = fields.Integer(load_default=100, validate=validate.Range(min=1, max=1000))


class AuditRecord(Schema):
    id = fields.Integer()
    log_index = fields.Integer(metadata={"description": "the Raft log index of the command"})
    at = fields.DateTime(allow_none=True)
    actor = fields.String(metadata={"description": 'a token\'s name, or "<user> via <token>"'})
    action = fields.String()
    dag_id = fields.String()
    run_id = fields.String()
    detail = fields.String()


class AuditList(Schema):
    records = fields.List(fields.Nested(AuditRecord), metadata={"description": "newest first"})
