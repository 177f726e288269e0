"""What the subcommand modules share: argparse types, the handler of a bare command group,
and the log setup of the long-running commands."""

from __future__ import annotations

import argparse
import logging
import sys

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


def setup_logging(level: str) -> None:
    """Log to stderr with time, level, logger and thread, unless logging is set up already."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(level)
