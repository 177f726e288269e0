"""How one config value is declared, parsed and shown: the field spec and its parsers.

Each config key is a dataclass field whose metadata holds a :class:`Setting`: its default as
the text a user would write in ``raftsched.cfg``, a parser and whether it is a secret. (Each
key's one-line help lives in ``raftsched.cfg.example``; a test keeps the two in step.)
Defaults go through the same parser as user input, so a default can never be a value the user
could not have written. A parser turns text into a typed value or raises ``ValueError`` whose
message says what is allowed ("expected a number > 0"); ``config.py`` adds the file, section,
key and value around it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (raw text, home) -> typed value. ``home`` anchors relative paths and derived defaults.
Parser = Callable[[str, Path], Any]

MASK = "***"


@dataclass(frozen=True)
class Setting:
    default: str
    parse: Parser
    secret: bool = False
    # How to show a non-secret value that may still embed one (a password inside a URL).
    mask: Callable[[Any], Any] | None = None


def setting(
    default: str,
    parse: Parser,
    *,
    secret: bool = False,
    mask: Callable[[Any], Any] | None = None,
) -> Any:
    """Declare a config key. Secrets get ``repr=False`` as well as being masked by display()."""
    spec = Setting(default, parse, secret, mask)
    return field(repr=not secret, metadata={"setting": spec})


def spec_of(f: dataclasses.Field[Any]) -> Setting:
    return f.metadata["setting"]


def display(value: Any, spec: Setting) -> Any:
    """A JSON-friendly form of a value that never contains a secret."""
    if spec.secret:
        if isinstance(value, tuple):
            return [MASK for _ in value]
        return MASK if value else ""
    if spec.mask is not None:
        value = spec.mask(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


# -- parsers ------------------------------------------------------------------------------


def number(*, gt: float | None = None, ge: float | None = None, le: float | None = None) -> Parser:
    bound = f" > {gt:g}" if gt is not None else f" >= {ge:g}" if ge is not None else ""
    bound += f" and <= {le:g}" if le is not None else ""

    def parse(raw: str, home: Path) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if (
            not math.isfinite(value)
            or (gt is not None and value <= gt)
            or (ge is not None and value < ge)
            or (le is not None and value > le)
        ):
            raise ValueError(f"expected a number{bound}")
        return value

    return parse


def integer(*, ge: int, le: int | None = None) -> Parser:
    bound = f">= {ge}" + (f" and <= {le}" if le is not None else "")

    def parse(raw: str, home: Path) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = ge - 1
        if value < ge or (le is not None and value > le):
            raise ValueError(f"expected a whole number {bound}")
        return value

    return parse


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def boolean(raw: str, home: Path) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError("expected true/false, yes/no, on/off or 1/0")


def text(*, required: bool = False) -> Parser:
    def parse(raw: str, home: Path) -> str:
        if required and not raw:
            raise ValueError("expected a non-empty value")
        return raw

    return parse


def choice(*options: str) -> Parser:
    """One of a few words, matched case-insensitively and returned as written in options."""

    def parse(raw: str, home: Path) -> str:
        for option in options:
            if raw.lower() == option.lower():
                return option
        raise ValueError(f"expected one of {', '.join(options)}")

    return parse


def path(*, optional: bool = False) -> Parser:
    """``~`` is expanded and a relative path is taken relative to home (not the cwd)."""

    def parse(raw: str, home: Path) -> Path | None:
        if not raw:
            if optional:
                return None
            raise ValueError("expected a path")
        return home / Path(raw).expanduser()  # an absolute right side replaces home

    return parse


_HOSTNAME = re.compile(r"[A-Za-z0-9_.-]+")


def split_host_port(raw: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port``; raises ValueError when either half is unusable."""
    host, sep, port = raw.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    valid_host = _is_ip(host) if bracketed else bool(_HOSTNAME.fullmatch(host))
    if not sep or not valid_host or not (port.isascii() and port.isdigit()):
        raise ValueError(raw)
    if not 1 <= int(port) <= 65535:
        raise ValueError(raw)
    return host, int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_HOST_PORT = "expected host:port with a port in 1..65535 (e.g. 127.0.0.1:7101 or [::1]:7101)"


def address(*, optional: bool = False) -> Parser:
    def parse(raw: str, home: Path) -> str:
        if not raw and optional:
            return ""
        try:
            split_host_port(raw)
        except ValueError:
            raise ValueError(_HOST_PORT + (", or empty" if optional else "")) from None
        return raw

    return parse


def _items(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def addresses(*, required: bool = False) -> Parser:
    def parse(raw: str, home: Path) -> tuple[str, ...]:
        items = _items(raw)
        allowed = f"comma-separated addresses, each {_HOST_PORT.removeprefix('expected ')}"
        if required and not items:
            raise ValueError(f"expected at least one address: {allowed}")
        for item in items:
            try:
                split_host_port(item)
            except ValueError:
                raise ValueError(f"{item!r} is not host:port; expected {allowed}") from None
        if len(set(items)) != len(items):
            raise ValueError("expected each address once; it lists one twice")
        return items

    return parse


def words(raw: str, home: Path) -> tuple[str, ...]:
    return _items(raw)


_TOKEN_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_TOKEN_SCOPE = re.compile(r"c[0-9a-f]{10}")


def token_names(raw: str, home: Path) -> tuple[tuple[str, str], ...]:
    """Comma-separated ``name=cXXXXXXXXXX``: the audit log's name for the token whose
    identity (``api.auth.caller_scope_of``: "c" and the first 10 hex digits of its SHA-256)
    is given; the token itself never appears here."""
    out = []
    for item in _items(raw):
        name, _, scope = item.partition("=")
        if not _TOKEN_NAME.fullmatch(name) or not _TOKEN_SCOPE.fullmatch(scope):
            raise ValueError(
                f"{item[:80]!r} is not name=identity; expected e.g. ci=c0123456789 (the"
                " identity: c and the first 10 hex digits of sha256(token))"
            )
        out.append((scope, name))
    return tuple(out)


_ENV_NAME = re.compile(r"[A-Za-z_*?\[\]!][A-Za-z0-9_*?\[\]!]*")


def env_names(raw: str, home: Path) -> tuple[str, ...]:
    """Comma-separated environment variable names or fnmatch patterns (``LC_*``)."""
    items = _items(raw)
    for item in items:
        if not _ENV_NAME.fullmatch(item):
            raise ValueError(
                f"{item!r} is not a variable name or pattern; expected comma-separated names"
                " such as PATH,HOME,LC_*"
            )
    return items


# SQLAlchemy dialects we ship a driver for. A bare postgresql:// would make SQLAlchemy look for
# psycopg2, which is not installed, so it is read as psycopg 3.
_DB_SCHEMES = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


def database_url(raw: str, home: Path) -> str:
    if not raw:
        return f"sqlite:///{home / 'raftsched.db'}"
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme.lower() not in _DB_SCHEMES or not rest:
        raise ValueError(
            "expected a sqlite:///path or postgresql+psycopg://user:password@host/db URL"
            " (empty: sqlite under home)"
        )
    return f"{_DB_SCHEMES[scheme.lower()]}://{rest}"


def mask_url_password(url: str) -> str:
    """``postgresql+psycopg://bob:pw@db/x`` -> ``postgresql+psycopg://bob:***@db/x``."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:{MASK}@{hostpart}"
    return re.sub(r"(?i)(password=)[^&]*", rf"\g<1>{MASK}", f"{scheme}{sep}{rest}")
