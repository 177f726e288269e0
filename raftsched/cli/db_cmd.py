"""`raftsched db migrate|check`: the metadata database's schema.

The URL comes from the config's ``[database] url`` (``--url`` overrides it, and then the
config is not read at all). ``check`` exits 0 at head and 1 otherwise, with the way out.
"""

from __future__ import annotations

import argparse
from typing import Any

from raftsched.cli.common import usage
from raftsched.cli.output import add_output_flag, emit


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    db = sub.add_parser("db", help="metadata database schema: migrate, check")
    db.set_defaults(handler=lambda _args: usage(db))
    db_sub = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND")

    migrate = db_sub.add_parser("migrate", help="upgrade the database schema to this release")
    check = db_sub.add_parser("check", help="exit 0 if the schema is current, 1 if not")
    for parser, handler in ((migrate, _migrate), (check, _check)):
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
    from raftsched.store.migrate import init_db

    engine = _engine(args)
    try:
        status = init_db(engine)
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
