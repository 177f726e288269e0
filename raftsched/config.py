"""One typed, immutable config object, read from ``raftsched.cfg`` and the environment.

Where the file comes from, first match wins: the explicit path (``--config``),
``$RAFTSCHED_CONFIG``, then ``$RAFTSCHED_HOME/raftsched.cfg`` if it exists (home defaults to
``~/raftsched``). No file at all is fine: every key has a default. Any key can be overridden
by the environment variable ``RAFTSCHED__SECTION__KEY``, which wins over the file.

Everything is checked at load, so a process fails at start with one line naming the file (or
variable), ``[section] key``, the value and what is allowed, never later in the middle of
work. Secrets never reach ``repr()``, ``str()`` or :meth:`Config.redacted`.
"""

from __future__ import annotations

import configparser
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from raftsched import config_schema as s
from raftsched.addresses import is_loopback
from raftsched.config_schema import setting
from raftsched.errors import ConfigError

ENV_PREFIX = "RAFTSCHED__"
DEFAULTS = "defaults"
FENCE_MARGIN_MIN = 1.0  # seconds
FENCE_MARGIN_FRACTION = 0.2  # of lease_ttl


def fence_margin(lease_ttl: float) -> float:
    """How long before its lease could expire a worker kills an attempt it could not
    heartbeat (``raftsched.worker.loop``): ``max(1s, 20% of lease_ttl)``. It covers the kill
    itself, the watchdog's tick and the cluster nodes' clocks disagreeing (a lease is stamped by
    one leader's clock and may be expired by the next one's). Capped at half the TTL for the
    sub-2-second TTLs only tests use (the config refuses them, see ``_check``)."""
    return min(max(FENCE_MARGIN_MIN, FENCE_MARGIN_FRACTION * lease_ttl), lease_ttl / 2)


class _Section:
    """Base of every section: a repr built from display values, so no secret leaks into it."""

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={_repr_value(getattr(self, f.name), s.spec_of(f))!r}"
            for f in fields(self)  # type: ignore[arg-type]
        )
        return f"{type(self).__name__}({shown})"

    def redacted(self) -> dict[str, Any]:
        return {
            f.name: s.display(getattr(self, f.name), s.spec_of(f))
            for f in fields(self)  # type: ignore[arg-type]
        }


def _repr_value(value: Any, spec: s.Setting) -> Any:
    return s.display(value, spec) if spec.secret or spec.mask else value


# setting() returns a dataclasses.field() with no default, so every key is a required argument
# and defaults live in one place, as text (RUF009 cannot see that it is a field).


@dataclass(frozen=True, repr=False)
class CoreConfig(_Section):
    # Read before every other key (see _build): relative paths and derived defaults hang off it.
    home: Path = setting("", s.path())  # noqa: RUF009
    dags_folder: Path = setting("dags", s.path())  # noqa: RUF009
    dag_file_timeout: float = setting("30", s.number(gt=0))
    dag_file_output_limit: int = setting("1048576", s.integer(ge=1))
    load_examples: bool = setting("true", s.boolean)
    logging_level: str = setting("INFO", s.choice("DEBUG", "INFO", "WARNING", "ERROR"))
    log_format: str = setting("text", s.choice("text", "json"))


@dataclass(frozen=True, repr=False)
class DatabaseConfig(_Section):
    url: str = setting("", s.database_url, mask=s.mask_url_password)
    pool_size: int = setting("5", s.integer(ge=1))
    connect_timeout: float = setting("5", s.number(gt=0))


@dataclass(frozen=True, repr=False)
class ClusterConfig(_Section):
    nodes: tuple[str, ...] = setting(
        "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", s.addresses(required=True)
    )
    self_address: str = setting("", s.address(optional=True))  # empty: nodes[0]
    secret: str = setting("", s.text(), secret=True)
    data_dir: Path = setting("data", s.path())  # noqa: RUF009
    raft_min_timeout: float = setting("0.15", s.number(gt=0))
    raft_max_timeout: float = setting("0.45", s.number(gt=0))
    append_entries_period: float = setting("0.04", s.number(gt=0))
    connection_timeout: float = setting("1", s.number(gt=0))
    connection_retry_time: float = setting("1", s.number(gt=0))
    # pysyncobj's own default is 30 s: a cut-off leader would believe it leads for that long.
    leader_fallback_timeout: float = setting("1.5", s.number(gt=0))
    commit_timeout: float = setting("5", s.number(gt=0))
    admin_bind: str = setting("", s.address(optional=True))
    # fsync the Raft journal and term/vote before acknowledging (off: a host crash or power
    # loss may lose acknowledged entries; see README "Benchmarks")
    durable_journal: bool = setting("true", s.boolean)
    # Log compaction (a snapshot) after this many log entries or seconds, whichever comes
    # first; each node's first one comes later by its own offset (cluster/settings.py).
    compaction_min_entries: int = setting("5000", s.integer(ge=2))
    compaction_min_seconds: float = setting("300", s.number(gt=0))
    # SIGTERM on the leader: seconds to wait for another node to take over (0: no handover)
    handover_timeout: float = setting("3", s.number(ge=0, le=30))

    @property
    def peers(self) -> tuple[str, ...]:
        """The other nodes: what this node's Raft connects to."""
        return tuple(node for node in self.nodes if node != self.self_address)


@dataclass(frozen=True, repr=False)
class SchedulerConfig(_Section):
    scheduler_heartbeat_sec: float = setting("5", s.number(gt=0))
    min_file_process_interval: float = setting("30", s.number(ge=0))
    max_outbox: int = setting("50000", s.integer(ge=1))
    materialize_batch: int = setting("500", s.integer(ge=1))
    run_retention_sec: float = setting("600", s.number(ge=0))
    max_runs_per_tick: int = setting("500", s.integer(ge=1))
    catchup_by_default: bool = setting("false", s.boolean)
    dags_are_paused_at_creation: bool = setting("false", s.boolean)


@dataclass(frozen=True, repr=False)
class ApiConfig(_Section):
    # Empty: the node's Raft host with port = Raft port + 200 (127.0.0.1:7101 -> :7301).
    grpc_bind: str = setting("", s.address(optional=True))
    admin_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    operator_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    viewer_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    worker_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    tls_cert: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    tls_key: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    tls_ca: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    max_message_bytes: int = setting("4194304", s.integer(ge=1))
    max_conf_bytes: int = setting("65536", s.integer(ge=1, le=65536))  # core.limits caps it

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None


@dataclass(frozen=True, repr=False)
class WebserverConfig(_Section):
    workers: int = setting("4", s.integer(ge=1))
    worker_class: str = setting("gunicorn.workers.gthread.ThreadWorker", s.text(required=True))
    threads: int = setting("4", s.integer(ge=1))
    bind: str = setting("127.0.0.1:8080", s.address())
    secret_key: str = setting("", s.text(), secret=True)
    grpc_servers: tuple[str, ...] = setting("", s.addresses())
    token: str = setting("", s.text(), secret=True)


@dataclass(frozen=True, repr=False)
class WorkerConfig(_Section):
    concurrency: int = setting("4", s.integer(ge=1))
    # 10 s / 2 s: see docs/architecture.md §11 (room for a failover and a black-holed node
    # between two accepted heartbeats; a dead worker process no longer waits for the TTL)
    lease_ttl: float = setting("10", s.number(ge=1, le=86400))  # core.limits' lease TTL range
    heartbeat_interval: float = setting("2", s.number(gt=0))
    servers: tuple[str, ...] = setting("", s.addresses())
    token: str = setting("", s.text(), secret=True)
    grace_period: float = setting("30", s.number(ge=0))
    task_env_allowlist: tuple[str, ...] = setting(
        "PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,LC_*,TZ,TMPDIR,PYTHONPATH", s.env_names
    )


@dataclass(frozen=True, repr=False)
class SecretsConfig(_Section):
    # Fernet keys of variables and connections (raftsched/secrets.py): encrypt with the first
    fernet_key: tuple[str, ...] = setting("", s.words, secret=True)


@dataclass(frozen=True)
class Config:
    core: CoreConfig
    database: DatabaseConfig
    cluster: ClusterConfig
    scheduler: SchedulerConfig
    api: ApiConfig
    webserver: WebserverConfig
    worker: WorkerConfig
    secrets: SecretsConfig
    source: str = DEFAULTS  # the file read, or "defaults"

    def redacted(self) -> dict[str, Any]:
        """Every value, secrets masked: safe to print, log or return as JSON."""
        shown: dict[str, Any] = {"source": self.source}
        shown.update({name: getattr(self, name).redacted() for name in SECTIONS})
        return shown


SECTIONS: dict[str, type[_Section]] = {
    "core": CoreConfig,
    "database": DatabaseConfig,
    "cluster": ClusterConfig,
    "scheduler": SchedulerConfig,
    "api": ApiConfig,
    "webserver": WebserverConfig,
    "worker": WorkerConfig,
    "secrets": SecretsConfig,
}

KEYS: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    for name, cls in SECTIONS.items()
}


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
