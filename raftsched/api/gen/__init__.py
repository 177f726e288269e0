"""Generated gRPC/protobuf modules for raftsched.v1. Do not edit: run `python scripts/gen_proto.py`."""
