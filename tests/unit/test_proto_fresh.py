"""The committed generated code in raftsched/api/gen matches proto/raftsched/v1/*.proto, and
the protos document every service, rpc, message, enum value and field."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `python scripts/gen_proto.py` and commit raftsched/api/gen"


def _gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_proto", module)
    spec.loader.exec_module(module)
    return module


def _versions(gen_dir: Path) -> str:
    grpc_module = gen_dir / "dag_pb2_grpc.py"
    text = grpc_module.read_text() if grpc_module.exists() else ""
    found = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", text)
    return found.group(1) if found else "unknown"


def test_generated_code_is_fresh():
    try:
        from grpc_tools import grpc_version
    except ImportError:
        pytest.fail("grpcio-tools is missing: `pip install -e .[dev]` (it generates the code)")

    gen = _gen_proto()
    stale = gen.stale_files()
    committed, here = _versions(gen.GEN_DIR), grpc_version.VERSION
    note = (
        ""
        if committed == here
        else f" Note: the committed code came from grpcio-tools {committed}, this environment"
        f" has {here}; regenerating with {here} also raises the grpcio/protobuf versions the"
        " code needs at runtime (update their floors in pyproject.toml), or install"
        f" grpcio-tools=={committed}."
    )
    assert not stale, f"raftsched/api/gen is stale ({', '.join(stale)}): {FIX}.{note}"


def test_generated_modules_import_as_a_package():
    from raftsched.api.gen import cluster_pb2, dag_pb2_grpc, worker_pb2

    assert cluster_pb2.DESCRIPTOR.package == "raftsched.v1"
    assert worker_pb2.TaskLease.__module__ == "raftsched.api.gen.worker_pb2"
    assert hasattr(dag_pb2_grpc, "DagServiceStub")


_DECLARATION = re.compile(
    r"^\s*(service |rpc |message |enum "  # services, rpcs, messages, enums
    r"|(optional |repeated )?[\w.<>, ]+ \w+ = \d+;"  # fields
    r"|[A-Z_0-9]+ = \d+;)"  # enum values
)


def test_every_declaration_has_a_comment():
    missing = []
    for proto in sorted((ROOT / "proto" / "raftsched" / "v1").glob("*.proto")):
        lines = proto.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if _DECLARATION.match(line) and not lines[number - 2].strip().startswith("//"):
                missing.append(f"{proto.name}:{number}: {line.strip()}")
    assert not missing, "document these with a // comment on the line above:\n" + "\n".join(missing)
