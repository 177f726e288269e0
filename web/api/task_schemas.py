"""Schema of a DAG's task definitions in ``GET /api/v1/dags/<dag_id>`` (``tasks[]``: what
``raftsched dags show`` and the DAG page's Tasks table show too)."""

from __future__ import annotations

from marshmallow import Schema, fields


class Task(Schema):
    task_id = fields.String()
    kind = fields.String()
    command = fields.String()
    callable_name = fields.String()
    retries = fields.Integer()
    trigger_rule = fields.String()
    upstream = fields.List(fields.String())
    execution_timeout = fields.Float(allow_none=True)
    pool = fields.String(metadata={"description": 'its pool ("default_pool" when it names none)'})
    pool_slots = fields.Integer(metadata={"description": "the pool slots one attempt takes"})
