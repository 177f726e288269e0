"""One typed, immutable config object, read from ``raftsched.cfg`` and the environment.

Where the file comes from, first match wins: the explicit path (``--config``),
``$RAFTSCHED_CONFIG``, then ``$RAFTSCHED_HOME/raftsched.cfg`` if it exists (home defaults to
``~/raftsched``). No file at all is fine: every key has a default. Any key can be overridden
by the environment variable ``RAFTSCHED__SECTION__KEY``, which wins over the file.

Everything is checked at load, so a process fails at start with one line naming the file (or
variable), ``[section] key``, the value and what is allowed, never later in the middle of
work. Secrets never reach ``repr()``, ``str()`` or :meth:`Config.redacted`.

The sections' dataclasses are in :mod:`raftsched.config_sections` (re-exported here); this
module reads the file and the environment, parses each key and checks the rules across keys.
"""

from __future__ import annotations

import configparser
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from raftsched import config_schema as s
from raftsched.addresses import is_loopback
from raftsched.config_sections import (
    DEFAULTS,
    KEYS,
    SECTIONS,
    ApiConfig,
    ClusterConfig,
    Config,
    CoreConfig,
    DatabaseConfig,
    SchedulerConfig,
    SecretsConfig,
    WebserverConfig,
    WorkerConfig,
)
from raftsched.errors import ConfigError

__all__ = [
    "DEFAULTS",
    "ENV_PREFIX",
    "FENCE_MARGIN_FRACTION",
    "FENCE_MARGIN_MIN",
    "KEYS",
    "SECTIONS",
    "ApiConfig",
    "ClusterConfig",
    "Config",
    "CoreConfig",
    "DatabaseConfig",
    "SchedulerConfig",
    "SecretsConfig",
    "WebserverConfig",
    "WorkerConfig",
    "default_config",
    "fence_margin",
    "load_config",
]

ENV_PREFIX = "RAFTSCHED__"
FENCE_MARGIN_MIN = 1.0  # seconds
FENCE_MARGIN_FRACTION = 0.2  # of lease_ttl


def fence_margin(lease_ttl: float) -> float:
    """How long before its lease could expire a worker kills an attempt it could not
    heartbeat (``raftsched.worker.loop``): ``max(1s, 20% of lease_ttl)``. It covers the kill
    itself, the watchdog's tick and the cluster nodes' clocks disagreeing (a lease is stamped by
    one leader's clock and may be expired by the next one's). Capped at half the TTL for the
    sub-2-second TTLs only tests use (the config refuses them, see ``_check``)."""
    return min(max(FENCE_MARGIN_MIN, FENCE_MARGIN_FRACTION * lease_ttl), lease_ttl / 2)


# -- loading ------------------------------------------------------------------------------

# section -> key -> (raw text, where it came from: the file path or the env var's name)
_Raw = dict[str, dict[str, tuple[str, str]]]


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Read the config file (if any) and ``RAFTSCHED__*`` overrides; raise ConfigError if bad."""
    env = os.environ if env is None else env
    file = _find_file(path, env)
    raw: _Raw = {name: {} for name in SECTIONS}
    if file is not None:
        _read_file(file, raw)
    _read_env(env, raw)
    return _build(raw, env, source=str(file) if file is not None else DEFAULTS)


def default_config(home: Path | None = None) -> Config:
    """Every key at its default. ``home`` defaults as usual: $RAFTSCHED_HOME, else ~/raftsched."""
    env = {"RAFTSCHED_HOME": str(home)} if home is not None else os.environ
    return _build({name: {} for name in SECTIONS}, env, source=DEFAULTS)


def _default_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("RAFTSCHED_HOME") or "~/raftsched").expanduser().absolute()


def _find_file(path: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    if path is not None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise ConfigError(f"{file}: config file not found", source=str(file))
        return file
    if env.get("RAFTSCHED_CONFIG"):
        file = Path(env["RAFTSCHED_CONFIG"]).expanduser()
        if not file.is_file():
            raise ConfigError(
                f"RAFTSCHED_CONFIG={file}: config file not found (unset it to use defaults)",
                source="RAFTSCHED_CONFIG",
            )
        return file
    file = _default_home(env) / "raftsched.cfg"
    return file if file.is_file() else None


def _read_file(file: Path, raw: _Raw) -> None:
    # Interpolation off: a '%' in a password is just a '%'. No DEFAULT section: it would copy
    # its keys into every section, where they would all be unknown keys.
    parser = configparser.ConfigParser(interpolation=None, default_section="\0")
    origin = str(file)
    try:
        with file.open(encoding="utf-8") as fh:
            parser.read_file(fh)
    except configparser.MissingSectionHeaderError as err:
        # Its own message quotes the line, which may hold a secret.
        raise ConfigError(
            f"{origin}: line {err.lineno}: expected a [section] header before the first key",
            source=origin,
        ) from None
    except configparser.ParsingError as err:
        lines = ", ".join(str(lineno) for lineno, _ in err.errors)
        raise ConfigError(
            f"{origin}: line {lines}: expected 'key = value' (comments start a line with # or ;)",
            source=origin,
        ) from None
    except (OSError, UnicodeDecodeError, configparser.Error) as err:
        raise ConfigError(f"{origin}: cannot read: {err}", source=origin) from None
    for section in parser.sections():
        _check_known(origin, section, None)
        for key, value in parser.items(section):
            _check_known(origin, section, key)
            raw[section][key] = (value.strip(), origin)


def _read_env(env: Mapping[str, str], raw: _Raw) -> None:
    for var, value in env.items():
        if var.startswith(ENV_PREFIX):
            section, sep, key = var.removeprefix(ENV_PREFIX).lower().partition("__")
            if not sep:
                raise ConfigError(
                    f"{var}: expected a name of the form RAFTSCHED__SECTION__KEY", source=var
                )
            _check_known(var, section, key)
            raw[section][key] = (value.strip(), var)


def _check_known(origin: str, section: str, key: str | None) -> None:
    if section not in SECTIONS:
        raise ConfigError(
            f"{origin}: [{section}]: unknown section{_did_you_mean(section, SECTIONS)};"
            f" sections are {', '.join(SECTIONS)}",
            source=origin,
            key=section,
        )
    if key is not None and key not in KEYS[section]:
        # The value is not shown: an unknown key may be a misspelt secret.
        raise ConfigError(
            f"{origin}: [{section}] {key}: unknown key{_did_you_mean(key, KEYS[section])};"
            f" [{section}] keys are {', '.join(KEYS[section])}",
            source=origin,
            key=f"{section}.{key}",
        )


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _build(raw: _Raw, env: Mapping[str, str], source: str) -> Config:
    # home first: every relative path and derived default hangs off it.
    home_text = raw["core"].get("home", ("", DEFAULTS))[0]
    home = Path(home_text).expanduser().absolute() if home_text else _default_home(env)
    values: dict[str, dict[str, Any]] = {}
    for section, cls in SECTIONS.items():
        values[section] = {"home": home} if section == "core" else {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in values[section]:
                continue
            spec = s.spec_of(f)
            text = raw[section].get(f.name, (spec.default, DEFAULTS))[0]
            try:
                values[section][f.name] = spec.parse(text, home)
            except ValueError as err:
                raise _bad(raw, (section, f.name), str(err)) from None
    _check_together(values, raw)
    sections = {name: cls(**values[name]) for name, cls in SECTIONS.items()}
    return Config(**sections, source=source)  # type: ignore[arg-type]


def _check_together(v: dict[str, dict[str, Any]], raw: _Raw) -> None:
    """Rules across keys, and the one default taken from another key (self_address).

    A broken rule blames the first of its keys that the user actually set.
    """
    cluster, api, worker = v["cluster"], v["api"], v["worker"]
    nodes = cluster["nodes"]
    if not cluster["self_address"]:
        cluster["self_address"] = nodes[0]
    elif cluster["self_address"] not in nodes:
        reason = f"expected one of [cluster] nodes: {', '.join(nodes)}"
        raise _bad(raw, ("cluster", "self_address"), reason)
    outside = [node for node in nodes if not is_loopback(node)]
    if not cluster["secret"] and outside:
        reason = (
            f"an empty [cluster] secret is allowed only when every node is on loopback, and"
            f" {', '.join(outside)} is not: set [cluster] secret (the Raft password, the same"
            " on every node)"
        )
        raise _bad(raw, ("cluster", "secret"), reason, also=("cluster", "nodes"))
    low, high, beat = (
        cluster["raft_min_timeout"],
        cluster["raft_max_timeout"],
        cluster["append_entries_period"],
    )
    if low >= high:
        reason = f"expected raft_min_timeout < raft_max_timeout (they are {low:g} and {high:g})"
        raise _bad(
            raw, ("cluster", "raft_max_timeout"), reason, also=("cluster", "raft_min_timeout")
        )
    if beat >= low:
        reason = (
            f"expected append_entries_period < raft_min_timeout (they are {beat:g} and {low:g}),"
            " or followers start elections between heartbeats"
        )
        raise _bad(
            raw, ("cluster", "append_entries_period"), reason, also=("cluster", "raft_min_timeout")
        )
    if (api["tls_cert"] is None) != (api["tls_key"] is None):
        key = "tls_cert" if api["tls_cert"] is not None else "tls_key"
        reason = "tls_cert and tls_key go together: set both (TLS) or neither (plaintext)"
        raise _bad(raw, ("api", key), reason)
    holder: dict[str, str] = {}
    for role in ("admin", "operator", "viewer", "worker"):
        for token in api[f"{role}_tokens"]:
            if token in holder:
                reason = f"a token may have one role; one of these is also in {holder[token]}"
                raise _bad(raw, ("api", f"{role}_tokens"), reason)
            holder[token] = f"{role}_tokens"
    if worker["heartbeat_interval"] >= worker["lease_ttl"]:
        reason = (
            f"expected heartbeat_interval < lease_ttl (they are {worker['heartbeat_interval']:g}"
            f" and {worker['lease_ttl']:g}), or leases expire between heartbeats"
        )
        raise _bad(raw, ("worker", "heartbeat_interval"), reason, also=("worker", "lease_ttl"))
    margin = max(FENCE_MARGIN_MIN, FENCE_MARGIN_FRACTION * worker["lease_ttl"])
    room = worker["lease_ttl"] - margin  # a worker kills an attempt unheartbeated this long
    if 2 * worker["heartbeat_interval"] > room:
        reason = (
            f"expected 2 x heartbeat_interval <= lease_ttl - max(1, 20% of lease_ttl) (they are"
            f" {worker['heartbeat_interval']:g} and {worker['lease_ttl']:g}): a worker kills an"
            f" attempt it could not heartbeat for {room:g}s, so at least two heartbeats must fit"
            " in that time; lower heartbeat_interval or raise lease_ttl"
        )
        raise _bad(raw, ("worker", "heartbeat_interval"), reason, also=("worker", "lease_ttl"))


def _bad(
    raw: _Raw, where: tuple[str, str], reason: str, also: tuple[str, str] | None = None
) -> ConfigError:
    """``<origin>: [section] key = '<value>': <reason>``, with secrets masked."""
    section, key = where
    if also is not None and where[1] not in raw[section] and also[1] in raw[also[0]]:
        section, key = also
    spec = s.spec_of(next(f for f in fields(SECTIONS[section]) if f.name == key))  # type: ignore[arg-type]
    text, origin = raw[section].get(key, (spec.default, DEFAULTS))
    shown = s.display(text, spec)
    return ConfigError(
        f"{origin}: [{section}] {key} = {shown!r}: {reason}",
        source=origin,
        key=f"{section}.{key}",
        value=shown,
    )
