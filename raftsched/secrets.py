"""Variables and connections: encryption, connection URIs, masking, and the API tasks use.

In a task (the worker injected what the task declared)::

    from raftsched.secrets import get_connection, get_variable

    token = get_variable("API_TOKEN")           # $RAFTSCHED_VAR_API_TOKEN
    db = get_connection("warehouse")           # parsed from $RAFTSCHED_CONN_warehouse
    db.host, db.port, db.login, db.password, db.schema, db.extra, db.uri

A task declares what it needs in its DAG file: ``BashTask(..., secrets=["API_TOKEN"],
connections=["warehouse"])``. The declaration travels as names only (the task's env entry
:data:`DECLARATION_ENV`); the worker asks the cluster for the values of the lease it holds
(``SecretService.ResolveSecrets``) and sets ``RAFTSCHED_VAR_<NAME>`` and
``RAFTSCHED_CONN_<ID>`` (the connection's URI) in the task's environment only.

At rest: the API node encrypts each value with Fernet (:class:`SecretBox`) under the first key
of ``[secrets] fernet_key`` (comma-separated; any of them decrypts, so a new key goes first and
the old ones stay until ``raftsched secrets rotate`` re-encrypted everything). Without a key a
node refuses to store or read values (:class:`SecretsNotConfigured` says how to make one).

Masked: the worker replaces every value it injected, and each credential part of a
connection (:func:`mask_values`), with ``***`` in whatever the attempt hands back (its output,
outcome message and return value: ``raftsched.masking``) before it leaves the worker; an
operator sees a connection with the same parts masked (:func:`masked_connection`).

Connection URIs (``raftsched.connection_uri``) and masking (``raftsched.masking``) are modules
of their own; their names can be imported from here too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Protocol
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from raftsched import secret_client
from raftsched.connection_uri import Connection as Connection
from raftsched.connection_uri import credential_parts
from raftsched.connection_uri import masked_connection as masked_connection
from raftsched.connection_uri import masked_uri as masked_uri
from raftsched.connection_uri import parse_connection as parse_connection
from raftsched.core import limits
from raftsched.errors import GENERATE_KEY, RaftschedError, SecretDecryptError, SecretsNotConfigured
from raftsched.masking import MASK as MASK
from raftsched.masking import MIN_MASKED_CHARS as MIN_MASKED_CHARS
from raftsched.masking import StreamMasker as StreamMasker
from raftsched.masking import mask_text as mask_text
from raftsched.masking import maskable as maskable

VARIABLE = "variable"
CONNECTION = "connection"
KINDS = (VARIABLE, CONNECTION)
VAR_ENV_PREFIX = "RAFTSCHED_VAR_"
CONN_ENV_PREFIX = "RAFTSCHED_CONN_"
# The task env entry naming what a task declares: "var:NAME,conn:ID" (names, never values)
DECLARATION_ENV = "RAFTSCHED_SECRETS"
# The worker's own environment, read first by EnvSecretsBackend
BACKEND_VAR_PREFIX = "RAFTSCHED_SECRET_VAR_"
BACKEND_CONN_PREFIX = "RAFTSCHED_SECRET_CONN_"


# -- encryption -----------------------------------------------------------------------------


class SecretBox:
    """Fernet under a list of keys: encrypts with the first, decrypts with any (MultiFernet)."""

    def __init__(self, keys: Iterable[str]) -> None:
        from cryptography.fernet import Fernet, MultiFernet  # only nodes and tests need it

        self.keys = tuple(k.strip() for k in keys if k.strip())
        if not self.keys:
            raise SecretsNotConfigured()
        try:
            self._fernet = MultiFernet([Fernet(k.encode()) for k in self.keys])
        except (ValueError, TypeError):
            raise RaftschedError(
                "[secrets] fernet_key: each key must be 32 url-safe base64-encoded bytes;"
                f" make one with: {GENERATE_KEY}"
            ) from None

    def __repr__(self) -> str:
        return f"SecretBox({len(self.keys)} keys)"  # never the keys

    def encrypt(self, value: str) -> str:
        return self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str:
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise SecretDecryptError(
                "a stored value cannot be decrypted with any key of [secrets] fernet_key: put"
                " back the key it was encrypted with (after the new one), then run"
                " `raftsched secrets rotate`"
            ) from None

    def rotate(self, token: str) -> str:
        """``token`` re-encrypted under the first key (decrypted with any)."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except InvalidToken:
            raise SecretDecryptError(
                "a stored value cannot be decrypted with any key of [secrets] fernet_key"
            ) from None

    def encrypted_with_first(self, token: str) -> bool:
        from cryptography.fernet import Fernet, InvalidToken

        try:
            Fernet(self.keys[0].encode()).decrypt(token.encode("ascii"))
        except InvalidToken:
            return False
        return True


def rotation_plan(
    box: SecretBox, records: Iterable[tuple[str, str, str, str]]
) -> list[tuple[str, str, str, str, str]]:
    """For (kind, key, ciphertext, description) records: (kind, key, new ciphertext,
    description, old ciphertext) of each one not yet under the first key. Proposed as
    compare-and-set ``SetSecret`` commands on the old ciphertext, so a value changed meanwhile
    is kept (it is under the first key already)."""
    return [
        (kind, key, box.rotate(ciphertext), description, ciphertext)
        for kind, key, ciphertext, description in records
        if not box.encrypted_with_first(ciphertext)
    ]


def box_from_config(keys: Iterable[str]) -> SecretBox | None:
    """The box for ``[secrets] fernet_key``, or None when no key is configured."""
    keys = tuple(k for k in keys if k.strip())
    return SecretBox(keys) if keys else None


# -- names and values -----------------------------------------------------------------------


def check_key(key: str) -> str:
    """A variable's or connection's name, or ValueError saying what is allowed."""
    if not (
        isinstance(key, str)
        and 0 < len(key) <= limits.MAX_SECRET_KEY_CHARS
        and limits.SECRET_KEY_PATTERN.fullmatch(key)
    ):
        raise ValueError(
            f"name {str(key)[:60]!r}: expected a letter or _ followed by letters, digits or _,"
            f" at most {limits.MAX_SECRET_KEY_CHARS} characters (e.g. MY_VAR)"
        )
    return key


def mask_values(kind: str, value: str) -> list[str]:
    """The texts to mask in logs for one value: the value, and each credential part of a
    connection as written in the URI, decoded, and encoded again."""
    out = [value]
    if kind != CONNECTION:
        return out
    try:
        found = credential_parts(value)
    except ValueError:
        return out
    for text, in_query in found:
        decoded = [unquote(text)] + ([unquote_plus(text)] if in_query else [])
        out.append(text)
        for plain in decoded:
            out += [plain, quote(plain, safe=""), quote_plus(plain, safe="")]
    return out


# -- the task's side --------------------------------------------------------------------------


def var_env(name: str) -> str:
    return VAR_ENV_PREFIX + name


def conn_env(conn_id: str) -> str:
    return CONN_ENV_PREFIX + conn_id


def get_variable(name: str, default: str | None = None) -> str:
    """A variable the task declared (``secrets=[...]``), from the environment the worker set.
    KeyError naming the fix when it is missing and no default is given."""
    value = os.environ.get(var_env(name))
    if value is not None:
        return value
    try:  # not declared: through the attempt's worker (raftsched.secret_client)
        value = secret_client.read(VARIABLE, name)
    except KeyError:
        if default is not None:
            return default
        raise
    if value is not None:
        return value
    if default is not None:
        return default
    raise KeyError(
        f"variable {name!r} is not in this task's environment: declare it in the DAG file"
        f" (secrets=[{name!r}]) and set it with `raftsched variables set {name} VALUE`"
    )


def get_connection(conn_id: str) -> Connection:
    """A connection the task declared (``connections=[...]``), parsed from its URI."""
    uri = os.environ.get(conn_env(conn_id))
    if uri is None:
        uri = secret_client.read(CONNECTION, conn_id)  # not declared: through the worker
    if uri is None:
        raise KeyError(
            f"connection {conn_id!r} is not in this task's environment: declare it in the DAG"
            f" file (connections=[{conn_id!r}]) and add it with `raftsched connections add"
            f" {conn_id} URI`"
        )
    return parse_connection(uri, conn_id)


# -- declarations (names only: they travel in the task's spec) -----------------------------


def encode_declaration(variables: Iterable[str], connections: Iterable[str]) -> str:
    items = [f"var:{check_key(v)}" for v in sorted(set(variables))]
    items += [f"conn:{check_key(c)}" for c in sorted(set(connections))]
    return ",".join(items)


def decode_declaration(text: str) -> tuple[list[str], list[str]]:
    """(variables, connections) named by a :data:`DECLARATION_ENV` value; ValueError if bad."""
    variables: list[str] = []
    connections: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        prefix, _, name = item.partition(":")
        if prefix == "var":
            variables.append(check_key(name))
        elif prefix == "conn":
            connections.append(check_key(name))
        else:
            raise ValueError(f"{DECLARATION_ENV}: {item[:60]!r} is neither var:NAME nor conn:ID")
    return variables, connections


def declared(env: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """What a task's env pairs declare (nothing when there is no declaration)."""
    for name, value in env:
        if name == DECLARATION_ENV:
            return decode_declaration(value)
    return [], []


# -- backends -------------------------------------------------------------------------------


class SecretsBackend(Protocol):
    """Where a worker looks for a value before it asks the cluster.

    Contract: ``get(kind, key)`` answers the value in clear text, or None when this backend
    does not have it (the next backend, finally the cluster, is asked). It never raises for a
    missing value, reads nothing from the cluster, and is safe to call from several threads.
    """

    def get(self, kind: str, key: str) -> str | None: ...


class EnvSecretsBackend:
    """Values from the worker's own environment: ``RAFTSCHED_SECRET_VAR_<NAME>`` and
    ``RAFTSCHED_SECRET_CONN_<ID>`` (a URI). Those variables never reach a task as themselves
    (the task environment's allow-list keeps every RAFTSCHED* name out)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def get(self, kind: str, key: str) -> str | None:
        prefix = BACKEND_VAR_PREFIX if kind == VARIABLE else BACKEND_CONN_PREFIX
        return self.environ.get(prefix + key)
