"""What the subcommand modules share: argparse types, the handler of a bare command group,
and the log setup of the long-running commands."""

from __future__ import annotations

import argparse

from raftsched.cli.main import EXIT_USAGE


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (ArgumentTypeError, a usage error, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def usage(parser: argparse.ArgumentParser) -> int:
    """For a command group run without its subcommand: print its help, exit 2."""
    parser.print_help()
    return EXIT_USAGE


def setup_logging(level: str, log_format: str = "text", *, node_id: str | None = None) -> None:
    """Log to stderr ([core] logging_level, log_format), unless logging is set up already:
    ``raftsched.logging_setup.setup_logging``, the one set-up of every process."""
    from raftsched.logging_setup import setup_logging as setup

    setup(level, log_format, node_id=node_id)
