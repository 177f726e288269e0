"""`raftsched db migrate|check|quarantine list|quarantine retry`: the metadata database.

The URL comes from the config's ``[database] url`` (``--url`` overrides it, and then the
config is not read at all). ``check`` exits 0 at head and 1 otherwise, with the way out.

``quarantine list`` shows the outbox entries the database refused (docs/architecture.md §5: the
materializer parks them in the ``outbox_quarantine`` table and goes on); ``quarantine retry``
writes them again, straight into the database, and exits 1 unless every one was written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raftsched.cli.common import EXIT_USAGE, usage
from raftsched.cli.output import add_output_flag, emit

QUARANTINE_COLUMNS = ("seq", "kind", "key", "error", "quarantined_at")
_TABLE_ERROR_CHARS = 160
_KEY_SUFFIXES = (("try_number", "try"), ("chunk_seq", "chunk"))
RETRY_HELP = """\
Write quarantined outbox entries into the metadata database again, each in its own
transaction, e.g. after fixing the row that conflicted with it. Each entry is written as it
was when it was refused, with upsert semantics, and it does not move the materialization
watermark. An entry older than the row its key holds now (say a task attempt's later state,
written after the entry was refused), or whose row cannot say (written before migration
0005), or an import-error list (it replaces the whole table) is NOT written: it stays in
quarantine with the reason; --force writes it anyway, over the newer row. A written entry
leaves the quarantine; a refused one stays with the database's new error. One line per
entry; exit 0 when every entry was written, 1 if not.
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    db = sub.add_parser("db", help="metadata database: migrate, check, quarantine")
    db.set_defaults(handler=lambda _args: usage(db))
    db_sub = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND")

    migrate = db_sub.add_parser("migrate", help="upgrade the database schema to this release")
    migrate.add_argument(
        "--to",
        metavar="REVISION",
        help="downgrade to this older revision instead (a rollback to an older release before"
        " the upgrade is finalized: README, Upgrading)",
    )
    check = db_sub.add_parser("check", help="exit 0 if the schema is current, 1 if not")
    quarantine = db_sub.add_parser(
        "quarantine", help="outbox entries the database refused: list, retry"
    )
    quarantine.set_defaults(handler=lambda _args: usage(quarantine))
    q_sub = quarantine.add_subparsers(dest="quarantine_command", metavar="SUBCOMMAND")
    q_list = q_sub.add_parser(
        "list",
        help="show the refused outbox entries: seq, kind, key fields, error, time",
        description="Show the outbox entries the metadata database refused and the"
        " materializer quarantined (the rest of their batches was written).",
    )
    q_retry = q_sub.add_parser(
        "retry",
        help="write quarantined entries again (SEQ ... or --all)",
        description=RETRY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q_retry.add_argument("seqs", nargs="*", type=int, metavar="SEQ", help="entries to retry")
    q_retry.add_argument("--all", action="store_true", help="retry every quarantined entry")
    q_retry.add_argument(
        "--force",
        action="store_true",
        help="write an entry even over a newer row of its key (the newer row is lost)",
    )
    commands = ((migrate, _migrate), (check, _check), (q_list, _q_list), (q_retry, _q_retry))
    for parser, handler in commands:
        parser.add_argument(
            "--url",
            metavar="URL",
            help="database URL, e.g. sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            " (default: [database] url of the config)",
        )
        add_output_flag(parser)
        parser.set_defaults(handler=handler)


def _engine(args: argparse.Namespace) -> Any:
    from raftsched.store.engine import create_engine_for

    if args.url:
        return create_engine_for(args.url)
    from raftsched.config import load_config

    database = load_config(args.config).database
    return create_engine_for(
        database.url, connect_timeout=database.connect_timeout, pool_size=database.pool_size
    )


def _migrate(args: argparse.Namespace) -> int:
    from raftsched.store.engine import safe_url
    from raftsched.store.migrate import downgrade_db, init_db

    engine = _engine(args)
    try:
        to = getattr(args, "to", None)
        status = downgrade_db(engine, to) if to else init_db(engine)
    finally:
        engine.dispose()
    url = safe_url(engine.url)
    if status.at_head:
        text = f"database {url} already at head revision {status.head}"
    else:
        text = f"database {url} migrated from {status.current or '<empty>'} to {status.head}"
    payload = {"url": url, "from": status.current, "to": status.head, "message": text}
    _print(args, payload, text)
    return 0


def _check(args: argparse.Namespace) -> int:
    from raftsched.store.engine import safe_url
    from raftsched.store.migrate import require_head

    engine = _engine(args)
    try:
        status = require_head(engine)  # raises MigrationRequired: exit 1 with the way out
    finally:
        engine.dispose()
    url = safe_url(engine.url)
    text = f"database {url} at head revision {status.head}"
    _print(args, {"url": url, "current": status.current, "head": status.head}, text)
    return 0


def _print(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    if args.output == "json":
        emit(payload, output="json")
    else:
        print(text)


# -- quarantine -----------------------------------------------------------------------------


def _q_list(args: argparse.Namespace) -> int:
    from raftsched.store.materializer import Materializer

    engine = _engine(args)
    try:
        entries = Materializer(engine).quarantined()
    finally:
        engine.dispose()
    if args.output == "json":
        emit([_entry_json(e) for e in entries], output="json")
        return 0
    rows = [
        {
            "seq": e.seq,
            "kind": e.kind,
            "key": _key_text(e.key, e.data),
            "error": _short(e.error),
            "quarantined_at": e.quarantined_at.isoformat(timespec="seconds"),
        }
        for e in entries
    ]
    emit(rows, output="table", columns=QUARANTINE_COLUMNS)
    print(f"{len(entries)} quarantined" + ("; `raftsched db quarantine retry`" if entries else ""))
    return 0


def _q_retry(args: argparse.Namespace) -> int:
    from raftsched.store.materializer import Materializer

    if bool(args.seqs) == bool(args.all):
        print(
            "raftsched db quarantine retry: give SEQ ... or --all (one of them);"
            " `raftsched db quarantine list` shows the seqs",
            file=sys.stderr,
        )
        return EXIT_USAGE
    engine = _engine(args)
    try:
        outcomes = Materializer(engine).retry_quarantined(
            None if args.all else args.seqs, force=args.force
        )
    finally:
        engine.dispose()
    if args.output == "json":
        emit([_outcome_json(o) for o in outcomes], output="json")
    else:
        for outcome in outcomes:
            print(_outcome_text(outcome))
        if not outcomes:
            print("nothing in quarantine")
    return 0 if all(o.written for o in outcomes) else 1


def _key_text(key: dict[str, Any], data: dict[str, Any]) -> str:
    """dag_id/run_id/task_id, then ``try N`` and ``chunk N``; the file count of import errors."""
    parts = ["/".join(str(key[k]) for k in ("dag_id", "run_id", "task_id") if k in key)]
    parts += [f"{label} {key[k]}" for k, label in _KEY_SUFFIXES if k in key]
    text = " ".join(part for part in parts if part)
    if not text and isinstance(data.get("errors"), list):
        return f"{len(data['errors'])} import errors"
    return text or "-"


def _short(text: str) -> str:
    return text if len(text) <= _TABLE_ERROR_CHARS else text[: _TABLE_ERROR_CHARS - 3] + "..."


def _entry_json(entry: Any) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "kind": entry.kind,
        "key": entry.key,
        "error": entry.error,
        "quarantined_at": entry.quarantined_at.isoformat(),
        "data": entry.data,
    }


def _outcome_json(outcome: Any) -> dict[str, Any]:
    return {
        "seq": outcome.seq,
        "kind": outcome.kind,
        "written": outcome.written,
        "error": outcome.error,
        "newer": outcome.newer,
    }


def _outcome_text(outcome: Any) -> str:
    if outcome.kind is None:
        return f"seq {outcome.seq}: not in quarantine (`raftsched db quarantine list`)"
    if outcome.written:
        return f"seq {outcome.seq} ({outcome.kind}): written, removed from quarantine"
    if outcome.newer:
        return (
            f"seq {outcome.seq} ({outcome.kind}): not written, kept: {outcome.error}; writing"
            " it would overwrite that row: check it, then --force to write it anyway"
        )
    return f"seq {outcome.seq} ({outcome.kind}): refused again, kept: {outcome.error}"
