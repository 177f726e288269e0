"""Connection URIs: their parts, and which parts can hold a credential.

A connection is a name and a URI, ``scheme://login:password@host:port/schema?extra``
(:func:`parse_connection`: what a task gets). A URI holds credentials in more places than its
password: a webhook's path (https://hooks.slack.com/services/T0/B0/SECRET), a query value
(?api_key=..., the connection's ``extra``), a fragment. Each such part is masked: for an
operator's GetSecret (:func:`masked_connection`: the shape stays, which host, which keys) and
in the logs and return values of a task that declares the connection
(:func:`credential_parts`, ``secrets.mask_values``). The rule is the same for every scheme (a
URI does not say which parts its service reads as a secret):

- the password;
- every path segment after the first (the first is a database name, or an API's fixed
  prefix such as Slack's ``services``); a service that puts a token in the first segment
  needs it in the password or the query instead;
- every query value, except the setting words of :data:`SETTING_VALUES` (``true``,
  ``require``...), which cannot hold a credential and would blank common words of a log; an
  item without ``=`` as a whole;
- the fragment.

The login and the host are an identity, not a credential: shown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

from raftsched.masking import MASK


@dataclass(frozen=True, slots=True)
class Connection:
    """A connection URI in parts. ``repr`` never shows the password."""

    conn_id: str
    conn_type: str
    host: str = ""
    port: int | None = None
    login: str = ""
    password: str = ""
    schema: str = ""
    extra: str = ""  # the query string
    uri: str = ""

    def __repr__(self) -> str:
        return f"Connection({self.conn_id!r}, {masked_uri(self.uri)!r})"

    __str__ = __repr__


def parse_connection(uri: str, conn_id: str = "") -> Connection:
    """``scheme://login:password@host:port/schema?extra``; ValueError when it is not a URI."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"connection {conn_id or ''} is not a valid URI: {err}") from None
    if not parts.scheme or not (parts.netloc or parts.path):
        raise ValueError(
            f"connection {conn_id or ''} is not a URI: expected"
            " scheme://login:password@host:port/schema?extra, e.g."
            " postgresql://user:pass@db.example:5432/app?sslmode=require"
        )
    return Connection(
        conn_id=conn_id,
        conn_type=parts.scheme,
        host=unquote(parts.hostname or ""),
        port=port,
        login=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        schema=unquote(parts.path.lstrip("/")),
        extra=parts.query,
        uri=uri,
    )


SETTING_VALUES = frozenset(
    {"true", "false", "yes", "no", "on", "off"}  # flags
    | {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}  # libpq's sslmode
)


@dataclass(frozen=True, slots=True)
class _Split:
    masked: str  # the URI with each credential part replaced by MASK
    path: str  # the masked path and query, as an operator's ``Connection`` shows them
    query: str
    secrets: tuple[tuple[str, bool], ...]  # (a credential part as written, is a query value)


def _split(uri: str) -> _Split:
    """ValueError when ``uri`` is not a URI urlsplit reads."""
    parts = urlsplit(uri)
    found: list[tuple[str, bool]] = []
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        login, _, password = userinfo.partition(":")
        netloc = f"{login}:{MASK}@{hostport}"
        found.append((password, False))
    path = parts.path
    body = path.lstrip("/")
    first, _, rest = body.partition("/")
    if rest:
        path = f"{path[: len(path) - len(body)]}{first}/{MASK}"
        found += [(rest, False)] + [(segment, False) for segment in rest.split("/") if segment]
    items = []
    for item in parts.query.split("&") if parts.query else ():
        name, eq, value = item.partition("=")
        if not eq:
            found.append((name, True))
            items.append(MASK if name else item)
        elif value and value.lower() not in SETTING_VALUES:
            found.append((value, True))
            items.append(f"{name}={MASK}")
        else:
            items.append(item)
    query = "&".join(items)
    fragment = MASK if parts.fragment else ""
    if parts.fragment:
        found.append((parts.fragment, False))
    # by hand, not urlunsplit: it would turn sqlite:////abs/file.db into sqlite://abs/file.db
    slashes = bool(netloc) or uri.lstrip()[len(parts.scheme) + 1 :].startswith("//")
    masked = "".join(
        (
            parts.scheme + ":",
            "//" + netloc if slashes else "",
            path,
            "?" + query if query else "",
            "#" + fragment if fragment else "",
        )
    )
    return _Split(masked, path, query, tuple((text, q) for text, q in found if text))


def credential_parts(uri: str) -> tuple[tuple[str, bool], ...]:
    """Each credential part of ``uri`` as written in it, and whether it is a query value
    (whose ``+`` may stand for a space). ValueError when it is not a URI."""
    return _split(uri).secrets


def masked_uri(uri: str) -> str:
    """The URI with each credential part (see above) replaced by ``***``."""
    try:
        return _split(uri).masked
    except ValueError:
        return MASK


def masked_connection(uri: str, conn_id: str = "") -> Connection:
    """The connection's parts as an operator sees them: host, port and login, the password,
    schema and extra with each credential part ``***``. ValueError when it is not a URI."""
    conn = parse_connection(uri, conn_id)
    split = _split(uri)
    return replace(
        conn,
        password=MASK if conn.password else "",
        schema=unquote(split.path.lstrip("/")),
        extra=split.query,
        uri=split.masked,
    )
