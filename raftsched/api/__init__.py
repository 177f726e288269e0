"""raftsched.api: the gRPC API (raftsched.v1) of a scheduler node, and the one client of it.

Server side:

- ``node_api``      one node's API: servicers wired to the node, the server, its health
- ``server``        ``build_server``: a gRPC server with raftsched's plumbing (``wrap``, ``auth``)
- ``servicers/``    the servicers (cluster, DAGs, workers, triggers, callbacks, secrets, pools,
  assets, users, audit, history...) and what they share (context, bounds, decoding)
- ``auth``, ``tls`` bearer tokens and roles; TLS credentials from PEM files
- ``status``        errors and refusals as gRPC status codes with an actionable message
- ``node_history``  a node's recent leader changes, elections and membership changes

Client side and shared:

- ``client``        ``RaftschedClient``: how the CLI, the web and workers reach the cluster
- ``attempts``      one call's attempts: which node next, when to retry, which error to raise
- ``consistency``, ``seen_index``  read-your-writes / monotonic reads on the wire
- ``wire``, ``asset_wire``, ``audit_view``, ``workers_view``  messages as plain data
- ``gen/``          generated protobuf modules (``scripts/gen_protos``; never edited)
"""
