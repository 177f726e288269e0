"""The `raftsched` command. Each area registers its subcommands from its own module.

Exit codes: 0 ok, 1 error, 2 usage, 3 cluster unavailable (141 when whoever read the output
closed it first, as in ``| head``, and no traceback). Errors are one clear line on
stderr, never a traceback (set RAFTSCHED_DEBUG=1 to see one).

Global flags go on either side of the subcommand: ``--config`` is accepted by every
subcommand too, and the connection flags of the admin commands (``--server``, ``--token``,
``--timeout``, ``--consistent``, ``--output``/``-o``: ``connect.add_connection_flags``) may
come before the subcommand, where :func:`hoist_connection_flags` moves them behind it. A
subcommand that does not take such a flag still refuses it (a usage error).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from raftsched import __version__
from raftsched.errors import ConfigError, NoQuorumError, RaftschedError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe


# One module per area; each adds its subcommands with register(sub). Imported when the parser
# is built, so `import raftsched.cli.main` stays cheap.
COMMAND_MODULES = (
    "assets_cmd",
    "audit_cmd",
    "cluster_cmd",
    "dags_cmd",
    "debug_cmd",
    "db_cmd",
    "pools_cmd",
    "runs_cmd",
    "standalone_cmd",
    "tasks_cmd",
    "triggerer_cmd",
    "users_cmd",
    "variables_cmd",
    "webserver_cmd",
    "worker_cmd",
    "workers_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftsched",
        description="A highly available workflow scheduler on Raft.",
    )
    parser.add_argument("--version", action="version", version=f"raftsched {__version__}")
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"raftsched.cli.{name}")
        module.register(sub)
    for subparser in _subparsers(parser):
        # SUPPRESS: a --config given before the subcommand is not overwritten by a default.
        subparser.add_argument(
            "--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP
        )
    return parser


CONFIG_HELP = "config file (default: $RAFTSCHED_CONFIG, else $RAFTSCHED_HOME/raftsched.cfg)"


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser``, each once (aliases share a parser)."""
    found: dict[int, argparse.ArgumentParser] = {}
    todo = [parser]
    while todo:
        for action in todo.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    if id(child) not in found:
                        found[id(child)] = child
                        todo.append(child)
    return list(found.values())


def _connection_options() -> dict[str, bool]:
    """Option string -> whether it takes a value, for every flag of add_connection_flags."""
    from raftsched.cli.connect import add_connection_flags

    probe = argparse.ArgumentParser(add_help=False)
    add_connection_flags(probe)
    return {
        option: action.nargs != 0 for action in probe._actions for option in action.option_strings
    }


def hoist_connection_flags(argv: Sequence[str]) -> list[str]:
    """``--server X dags list`` -> ``dags list --server X``: connection flags written before the
    subcommand move behind the whole command line (before a ``--``, if there is one)."""
    options = _connection_options()
    head: list[str] = []
    moved: list[str] = []
    i, args = 0, list(argv)
    while i < len(args):
        token = args[i]
        if token == "--" or not token.startswith("-"):
            break  # the subcommand (or a stray positional): the rest stays as it is
        name = token.partition("=")[0] if token.startswith("--") else token[:2]
        if name in options:
            attached = token != name  # --server=X, -ojson
            width = 2 if options[name] and not attached else 1
            moved += args[i : i + width]
            i += width
            continue
        width = 2 if token == "--config" else 1
        head += args[i : i + width]
        i += width
    rest = args[i:]
    if "--" in rest:
        cut = rest.index("--")
        return head + rest[:cut] + moved + rest[cut:]
    return head + rest + moved


def parse_args(
    argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None
) -> argparse.Namespace:
    """Parse a command line as ``raftsched`` does (global flags on either side)."""
    parser = parser or build_parser()
    return parser.parse_args(hoist_connection_flags(sys.argv[1:] if argv is None else argv))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        code = int(handler(args) or EXIT_OK)
        # Flushed here, where a reader that went away (`... | head`) is caught below, rather
        # than at interpreter exit, where it would print a traceback.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return 130
    except NoQuorumError as err:
        _print_error(err)
        return EXIT_UNAVAILABLE
    except ConfigError as err:
        _print_error(err)
        return EXIT_USAGE
    except RaftschedError as err:
        _print_error(err)
        return EXIT_ERROR


def _stdout_closed() -> int:
    """Whoever read our output stopped reading: quietly exit as a tool killed by SIGPIPE would.

    stdout now points at /dev/null, so the flush at exit of what is still buffered cannot
    raise again (the recipe of Python's signal module docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _print_error(err: BaseException) -> None:
    if os.environ.get("RAFTSCHED_DEBUG"):
        import traceback

        traceback.print_exception(err)
    print(f"raftsched: error: {err}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
