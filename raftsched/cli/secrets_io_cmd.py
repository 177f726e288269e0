"""``raftsched variables|connections import FILE`` and ``export [FILE]``: Airflow's JSON files.

    raftsched variables import vars.json [-a overwrite|skip|fail]   {"NAME": value, ...}
    raftsched variables export [vars.json]                          (default: stdout)
    raftsched connections import conns.json [--overwrite]           {"ID": {...} | "URI"}
    raftsched connections export [conns.json] [--serialization-format json|uri]

The shapes are Airflow's (``airflow variables import``, ``airflow connections export``): a
variable's value is a string, or any other JSON value, stored as its JSON text (so
``Variable.get(key, deserialize_json=True)`` gets it back); export writes a stored JSON text
as the JSON value it spells, as Airflow does. A connection is a URI or Airflow's object
(``conn_type``, ``host``, ``login``, ``password``, ``schema``, ``port``, ``extra``,
``description``), translated by :mod:`raftsched.airflow_secrets`. Like Airflow, a
connection that exists already is skipped unless ``--overwrite``.

Both need role admin (export reads every value in clear text). A file is hostile until
bounded: at most :data:`MAX_FILE_BYTES`, :data:`MAX_ENTRIES` entries, names and values checked
before anything is written, so a bad file changes nothing. An export file is created with mode
0600. No value is ever printed in a message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from raftsched import airflow_secrets
from raftsched import secrets as sx
from raftsched.cli.connect import add_connection_flags, cluster_call, connect
from raftsched.core import limits
from raftsched.errors import RaftschedError

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 2_000


def register(kind_sub: argparse._SubParsersAction, kind: str) -> None:  # type: ignore[type-arg]
    group = f"{kind}s"
    imp = kind_sub.add_parser(
        "import",
        help=f"create {group} from Airflow's JSON file (needs role admin)",
        description=f"Create or replace {group} from a JSON file in Airflow's shape"
        + (
            ' ({"NAME": value}; a value that is not a string is stored as its JSON text).'
            if kind == sx.VARIABLE
            else ' ({"ID": "URI"} or {"ID": {"conn_type": ..., "host": ..., "login": ...,'
            ' "password": ..., "schema": ..., "port": ..., "extra": {...}}}).'
        )
        + " FILE - reads stdin. Every entry is checked before any is written.",
    )
    imp.add_argument("file", metavar="FILE")
    if kind == sx.VARIABLE:
        imp.add_argument(
            "-a",
            "--action-on-existing-key",
            choices=("overwrite", "skip", "fail"),
            default="overwrite",
            help="a variable that exists already (default: overwrite, as Airflow)",
        )
    else:
        imp.add_argument(
            "--overwrite", action="store_true", help="replace connections that exist already"
        )
    add_connection_flags(imp)
    imp.set_defaults(handler=cmd_import, kind=kind)

    exp = kind_sub.add_parser(
        "export",
        help=f"write every {kind} in Airflow's JSON shape (needs role admin)",
        description=f"Write every {kind} with its value in clear text, in Airflow's JSON"
        " shape, to FILE (created with mode 0600) or to stdout.",
    )
    exp.add_argument("file", metavar="FILE", nargs="?", default="-", help="default: stdout")
    if kind == sx.CONNECTION:
        exp.add_argument(
            "--serialization-format",
            choices=("json", "uri"),
            default="json",
            help="each connection as Airflow's object (default) or as its URI",
        )
    add_connection_flags(exp)
    exp.set_defaults(handler=cmd_export, kind=kind)


# -- import ----------------------------------------------------------------------------------


def read_file(path: str) -> dict[str, Any]:
    """The JSON object of ``path`` (``-``: stdin), bounded before it is parsed."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise RaftschedError(f"cannot read {path}: {err.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise RaftschedError(f"{path}: larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        where = f" (line {err.lineno})" if isinstance(err, json.JSONDecodeError) else ""
        raise RaftschedError(f'{path}: not a JSON file{where}; expected {{"NAME": ...}}') from None
    if not isinstance(parsed, dict):
        raise RaftschedError(f"{path}: expected a JSON object of names, got a list or a value")
    if len(parsed) > MAX_ENTRIES:
        raise RaftschedError(f"{path}: {len(parsed)} entries; at most {MAX_ENTRIES} a file")
    return parsed


def prepared(kind: str, entries: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, value, description) of each entry, or RaftschedError naming every bad one (by
    name, never by value) before anything is written."""
    out: list[tuple[str, str, str]] = []
    bad: list[str] = []
    for key, raw in entries.items():
        try:
            sx.check_key(key)
            if kind == sx.VARIABLE:
                value = raw if isinstance(raw, str) else json.dumps(raw)
                description = ""
            else:
                value = airflow_secrets.connection_uri(key, raw)
                description = str(raw.get("description") or "") if isinstance(raw, dict) else ""
            if not value:
                raise ValueError(f"{key}: empty value")
            if len(value) > limits.MAX_SECRET_VALUE_CHARS:
                raise ValueError(f"{key}: longer than {limits.MAX_SECRET_VALUE_CHARS} characters")
            if len(description) > limits.MAX_SECRET_DESCRIPTION_CHARS:
                raise ValueError(f"{key}: description too long")
        except ValueError as err:
            bad.append(str(err))
            continue
        out.append((key, value, description))
    if bad:
        shown = "\n  ".join(bad[:20]) + (
            f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        )
        raise RaftschedError(f"nothing imported; fix these {kind}s first:\n  {shown}")
    return out


def cmd_import(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    kind = args.kind
    items = prepared(kind, read_file(args.file))
    if kind == sx.VARIABLE:
        on_existing = args.action_on_existing_key
    else:
        on_existing = "overwrite" if args.overwrite else "skip"
    counts = {"set": 0, "unchanged": 0, "skipped": 0}
    with connect(args) as client, cluster_call(f"{kind}s import", role="admin"):
        existing = set()
        if on_existing != "overwrite":
            listed = client.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind=kind))
            existing = {s.key for s in listed.secrets}
            clash = sorted(key for key, _, _ in items if key in existing)
            if clash and on_existing == "fail":
                raise RaftschedError(
                    f"nothing imported: {len(clash)} {kind}(s) exist already"
                    f" ({', '.join(clash[:10])}); pass -a overwrite or -a skip"
                )
        for key, value, description in items:
            if key in existing:
                counts["skipped"] += 1
                print(f"{kind} {key!r} exists: skipped", file=sys.stderr)
                continue
            request = secret_pb2.SetSecretRequest(
                kind=kind, key=key, value=value, description=description
            )
            response = client.secrets.SetSecret(request)
            counts["set" if response.changed else "unchanged"] += 1
    if args.output == "json":
        print(json.dumps({"kind": kind, **counts}))
    else:
        print(
            f"{len(items)} {kind}(s) in {args.file}: {counts['set']} set,"
            f" {counts['unchanged']} unchanged, {counts['skipped']} skipped"
        )
    return 0


# -- export ----------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    kind = args.kind
    out: dict[str, Any] = {}
    with connect(args) as client, cluster_call(f"{kind}s export", role="admin"):
        listed = client.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind=kind))
        for s in listed.secrets:
            request = secret_pb2.GetSecretRequest(kind=kind, key=s.key, reveal=True)
            secret = client.secrets.GetSecret(request)
            out[s.key] = exported(kind, s.key, secret.value, secret.description, args)
    text = json.dumps(out, indent=4, sort_keys=True) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
        return 0
    try:  # values in clear text: readable by this user only, from the first byte
        fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise RaftschedError(f"cannot write {args.file}: {err.strerror}") from None
    print(f"{len(out)} {kind}(s) exported to {args.file}")
    return 0


def exported(kind: str, key: str, value: str, description: str, args: argparse.Namespace) -> Any:
    if kind == sx.VARIABLE:  # a stored JSON text goes back as the value it spells (Airflow's)
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    if args.serialization_format == "uri":
        return value
    fields = airflow_secrets.connection_fields(key, value)
    fields["description"] = description or None
    return fields
