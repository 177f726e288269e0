"""Regenerate ``raftsched/api/gen`` from ``proto/raftsched/v1/*.proto``.

    python scripts/gen_proto.py          # rewrite the committed generated code
    python scripts/gen_proto.py --check  # exit 1 if it is stale (tests/unit/test_proto_fresh.py)

Runs ``grpc_tools.protoc`` (the ``grpcio-tools`` package) with ``--python_out``,
``--pyi_out`` and ``--grpc_python_out``, then lays the modules out flat in
``raftsched/api/gen`` (``raftsched.api.gen.cluster_pb2``, ``...cluster_pb2_grpc``) and rewrites
their imports of each other (``from raftsched.v1 import common_pb2``) to package-relative ones
(``from . import common_pb2``), so they import from any install location. The descriptors keep
their proto names (``raftsched/v1/cluster.proto``, package ``raftsched.v1``): that is what
reflection and other languages see.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_DIR = PROTO_ROOT / "raftsched" / "v1"
GEN_DIR = ROOT / "raftsched" / "api" / "gen"
COMMAND = "python scripts/gen_proto.py"

INIT = f'''"""Generated gRPC/protobuf modules for raftsched.v1. Do not edit: run `{COMMAND}`."""
'''

_SIBLING_IMPORT = re.compile(r"^from raftsched\.v1 import ", re.MULTILINE)
_MODULE_NAME = re.compile(r"'raftsched\.v1\.(\w+_pb2)'")


def _fix(text: str) -> str:
    """Sibling imports become relative; message classes get their real ``__module__``."""
    text = _SIBLING_IMPORT.sub("from . import ", text)
    return _MODULE_NAME.sub(r"'raftsched.api.gen.\1'", text)


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules (and ``__init__.py``) into ``out_dir``; return their paths."""
    from grpc_tools import protoc  # a dev dependency: import only when generating

    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_DIR}")
    include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    with tempfile.TemporaryDirectory(prefix="raftsched-protoc-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--proto_path={include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(p.relative_to(PROTO_ROOT)) for p in protos),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed (its messages are above)")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for source in sorted((Path(tmp) / "raftsched" / "v1").iterdir()):
            target = out_dir / source.name
            target.write_text(_fix(source.read_text()))
            written.append(target)
    init = out_dir / "__init__.py"
    init.write_text(INIT)
    return [init, *written]


def stale_files(committed: Path = GEN_DIR) -> list[str]:
    """Names of files in ``committed`` that differ from a fresh generation (or are missing
    from either side); empty when the committed code is fresh."""
    with tempfile.TemporaryDirectory(prefix="raftsched-gen-") as tmp:
        fresh = {p.name: p.read_text() for p in generate(Path(tmp))}
    have = {
        p.name: p.read_text()
        for p in committed.iterdir()
        if p.is_file() and p.suffix in (".py", ".pyi")
    }
    return sorted(name for name in fresh.keys() | have.keys() if fresh.get(name) != have.get(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the code is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {', '.join(stale)}; run `{COMMAND}`", file=sys.stderr)
            return 1
        print("generated code is fresh")
        return 0
    with tempfile.TemporaryDirectory(prefix="raftsched-gen-") as tmp:
        fresh = generate(Path(tmp))
        if GEN_DIR.exists():
            shutil.rmtree(GEN_DIR)
        GEN_DIR.mkdir(parents=True)
        for path in fresh:
            shutil.copy2(path, GEN_DIR / path.name)
    print(f"wrote {len(fresh)} files to {GEN_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
