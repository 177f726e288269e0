"""Schemas of ``GET /api/v1/workers`` (the workers page's data, ``raftsched.web.workers``)."""

from __future__ import annotations

from marshmallow import Schema, fields


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
