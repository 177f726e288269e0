"""The `raftsched` command. Each area registers its subcommands from its own module.

Exit codes: 0 ok, 1 error, 2 usage, 3 cluster unavailable. Errors are one clear line on
stderr, never a traceback (set RAFTSCHED_DEBUG=1 to see one).
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


# One module per area; each adds its subcommands with register(sub). Imported when the parser
# is built, so `import raftsched.cli.main` stays cheap.
COMMAND_MODULES = (
    "cluster_cmd",
    "dags_cmd",
    "db_cmd",
    "runs_cmd",
    "standalone_cmd",
    "tasks_cmd",
    "users_cmd",
    "webserver_cmd",
    "worker_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftsched",
        description="A highly available workflow scheduler on Raft.",
    )
    parser.add_argument("--version", action="version", version=f"raftsched {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file (default: $RAFTSCHED_CONFIG, else $RAFTSCHED_HOME/raftsched.cfg)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"raftsched.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(handler(args) or EXIT_OK)
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


def _print_error(err: BaseException) -> None:
    if os.environ.get("RAFTSCHED_DEBUG"):
        import traceback

        traceback.print_exception(err)
    print(f"raftsched: error: {err}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
