"""REST schemas of the cluster's history (``GET /api/v1/cluster/history``) and a DAG's
source (``GET /api/v1/dags/<dag>/source``): what the cluster page and the code view show."""

from __future__ import annotations

from marshmallow import Schema, fields


class NodeEvent(Schema):
    at = fields.AwareDateTime(allow_none=True)
    kind = fields.String(
        metadata={
            "description": "start, election, leader_change, role, member_added, member_removed"
        }
    )
    term = fields.Integer()
    detail = fields.String()


class NodeSample(Schema):
    at = fields.AwareDateTime(allow_none=True)
    commit_index = fields.Integer()
    apply_lag = fields.Integer(metadata={"description": "commit index minus applied index"})
    commit_latency_seconds = fields.Float(
        allow_none=True,
        metadata={"description": "mean of the commits this node proposed in the interval"},
    )


class NodeHistory(Schema):
    node_id = fields.String()
    role = fields.String()
    events = fields.List(fields.Nested(NodeEvent), metadata={"description": "oldest first"})
    samples = fields.List(
        fields.Nested(NodeSample), metadata={"description": "oldest first, every 5 s, 2 h"}
    )


class ClusterHistory(Schema):
    nodes = fields.List(fields.Nested(NodeHistory))


class DagSource(Schema):
    fileloc = fields.String()
    source = fields.String(metadata={"description": "at most max_bytes of the file"})
    truncated = fields.Boolean()
    size_bytes = fields.Integer()
    max_bytes = fields.Integer()
    spec_hash = fields.String(metadata={"description": "of the DAG as parsed"})
    file_modified = fields.AwareDateTime(allow_none=True)
    parsed_at = fields.AwareDateTime(allow_none=True)
    error = fields.String()
    node_id = fields.String(metadata={"description": "the node that read the file"})
