from __future__ import annotations

import configparser
import dataclasses
import json
from pathlib import Path

import pytest

from raftsched.config import KEYS, SECTIONS, Config, default_config, load_config
from raftsched.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "raftsched.cfg.example"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def write_cfg(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_text(home: Path, text: str, **env: str) -> tuple[Config, Path]:
    """Load ``text`` as an explicit config file, with only the given env vars set."""
    file = write_cfg(home.parent / "given.cfg", text)
    return load_config(file, env={"RAFTSCHED_HOME": str(home), **env}), file


def load_error(home: Path, text: str, **env: str) -> tuple[ConfigError, Path]:
    file = write_cfg(home.parent / "given.cfg", text)
    with pytest.raises(ConfigError) as caught:
        load_config(file, env={"RAFTSCHED_HOME": str(home), **env})
    return caught.value, file


# -- defaults and where the file comes from ------------------------------------------------


def test_defaults(home: Path) -> None:
    cfg = default_config(home)
    assert cfg.source == "defaults"
    assert cfg.core.home == home
    assert cfg.core.dags_folder == home / "dags"
    assert cfg.core.dag_file_timeout == 30.0
    assert cfg.core.dag_file_output_limit == 1_048_576
    assert cfg.core.load_examples is True
    assert cfg.database.url == f"sqlite:///{home}/raftsched.db"
    assert cfg.database.pool_size == 5
    assert cfg.cluster.nodes == ("127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103")
    assert cfg.cluster.self_address == "127.0.0.1:7101"
    assert cfg.cluster.peers == ("127.0.0.1:7102", "127.0.0.1:7103")
    assert cfg.cluster.secret == ""
    assert cfg.cluster.data_dir == home / "data"
    assert cfg.cluster.commit_timeout == 5.0
    assert cfg.scheduler.scheduler_heartbeat_sec == 5.0
    assert cfg.scheduler.min_file_process_interval == 30.0
    assert cfg.scheduler.max_outbox == 50_000
    assert cfg.api.grpc_bind == ""  # derived per node: Raft port + 200
    assert cfg.api.admin_tokens == ()
    assert cfg.api.tls_cert is None and not cfg.api.tls_enabled
    assert cfg.webserver.workers == 4
    assert cfg.webserver.worker_class == "gunicorn.workers.gthread.ThreadWorker"
    assert cfg.webserver.grpc_servers == ()
    assert cfg.worker.heartbeat_interval == 2.0
    assert cfg.worker.lease_ttl == 10.0


def test_home_defaults_to_env_then_user_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_config(env={}).core.home == tmp_path / "raftsched"
    assert load_config(env={"RAFTSCHED_HOME": "/srv/rs"}).core.home == Path("/srv/rs")
    monkeypatch.setenv("RAFTSCHED_HOME", "/opt/rs")
    assert default_config().core.home == Path("/opt/rs")


def test_no_file_anywhere_means_defaults(home: Path) -> None:
    cfg = load_config(env={"RAFTSCHED_HOME": str(home)})
    assert cfg == dataclasses.replace(default_config(home), source="defaults")


@pytest.mark.parametrize("how", ["explicit", "RAFTSCHED_CONFIG", "RAFTSCHED_HOME"])
def test_file_is_found(home: Path, how: str) -> None:
    text = "[webserver]\nworkers = 9\n"
    decoy = write_cfg(home.parent / "decoy.cfg", "[webserver]\nworkers = 1\n")
    env = {"RAFTSCHED_HOME": str(home)}
    if how == "explicit":
        file = write_cfg(home.parent / "explicit.cfg", text)
        env["RAFTSCHED_CONFIG"] = str(decoy)  # the explicit path wins over the env var
        cfg = load_config(file, env=env)
    elif how == "RAFTSCHED_CONFIG":
        file = write_cfg(home.parent / "from_env.cfg", text)
        write_cfg(home / "raftsched.cfg", "[webserver]\nworkers = 1\n")  # loses to the env var
        cfg = load_config(env={**env, "RAFTSCHED_CONFIG": str(file)})
    else:
        file = write_cfg(home / "raftsched.cfg", text)
        cfg = load_config(env=env)
    assert cfg.webserver.workers == 9
    assert cfg.source == str(file)


@pytest.mark.parametrize(
    ("explicit", "env_file", "expected"),
    [
        ("missing.cfg", None, "missing.cfg: config file not found"),
        (None, "missing.cfg", "RAFTSCHED_CONFIG="),
    ],
)
def test_named_file_must_exist(
    home: Path, explicit: str | None, env_file: str | None, expected: str
) -> None:
    env = {"RAFTSCHED_HOME": str(home)}
    if env_file:
        env["RAFTSCHED_CONFIG"] = str(home / env_file)
    with pytest.raises(ConfigError, match=expected):
        load_config(home / explicit if explicit else None, env=env)


def test_env_overrides_file(home: Path) -> None:
    cfg, _ = load_text(
        home,
        "[scheduler]\nscheduler_heartbeat_sec = 7\nmax_outbox = 10\n",
        RAFTSCHED__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
        RAFTSCHED__WEBSERVER__BIND="0.0.0.0:80",
    )
    assert cfg.scheduler.scheduler_heartbeat_sec == 2.0  # env wins
    assert cfg.scheduler.max_outbox == 10  # file still applies
    assert cfg.webserver.bind == "0.0.0.0:80"


def test_home_from_file_moves_derived_defaults(home: Path, tmp_path: Path) -> None:
    cfg, _ = load_text(home, f"[core]\nhome = {tmp_path / 'elsewhere'}\n")
    assert cfg.core.dags_folder == tmp_path / "elsewhere" / "dags"
    assert cfg.database.url == f"sqlite:///{tmp_path / 'elsewhere'}/raftsched.db"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("~/x", "HOME/x"),
        ("relative/dags", "RSHOME/relative/dags"),
        ("/abs/dags", "/abs/dags"),
    ],
)
def test_paths(
    monkeypatch: pytest.MonkeyPatch, home: Path, tmp_path: Path, value: str, expected: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg, _ = load_text(home, f"[core]\ndags_folder = {value}\n")
    expected = expected.replace("RSHOME", str(home)).replace("HOME", str(tmp_path))
    assert cfg.core.dags_folder == Path(expected)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(w, True) for w in ("true", "TRUE", "yes", "Yes", "1", "on", "ON")]
    + [(w, False) for w in ("false", "False", "no", "NO", "0", "off", "Off")],
)
def test_booleans(home: Path, raw: str, expected: bool) -> None:
    cfg, _ = load_text(home, f"[core]\nload_examples = {raw}\n")
    assert cfg.core.load_examples is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("sqlite:////var/lib/rs.db", "sqlite:////var/lib/rs.db"),
        ("postgresql+psycopg://u:p@db:5432/rs", "postgresql+psycopg://u:p@db:5432/rs"),
        ("postgresql://u:p@db/rs", "postgresql+psycopg://u:p@db/rs"),
    ],
)
def test_database_urls(home: Path, raw: str, expected: str) -> None:
    cfg, _ = load_text(home, f"[database]\nurl = {raw}\n")
    assert cfg.database.url == expected


@pytest.mark.parametrize(
    "nodes",
    ["localhost:1,localhost:2", "[::1]:7101,[::1]:7102", "127.0.0.2:1,127.0.0.3:1"],
)
def test_empty_secret_is_fine_on_loopback(home: Path, nodes: str) -> None:
    cfg, _ = load_text(home, f"[cluster]\nnodes = {nodes}\n")
    assert cfg.cluster.self_address == nodes.split(",")[0]


def test_multiline_list_and_secret_nodes(home: Path) -> None:
    text = "[cluster]\nnodes = 10.0.0.1:7101,\n  10.0.0.2:7101\nself_address = 10.0.0.2:7101\n"
    cfg, _ = load_text(home, text + "secret = s3cr%t\n")
    assert cfg.cluster.nodes == ("10.0.0.1:7101", "10.0.0.2:7101")
    assert cfg.cluster.peers == ("10.0.0.1:7101",)
    assert cfg.cluster.secret == "s3cr%t"  # no interpolation


# -- errors --------------------------------------------------------------------------------

BAD_VALUES = [
    ("scheduler", "scheduler_heartbeat_sec", "abc", "expected a number > 0"),
    ("scheduler", "scheduler_heartbeat_sec", "0", "expected a number > 0"),
    ("scheduler", "scheduler_heartbeat_sec", "nan", "expected a number > 0"),
    ("scheduler", "min_file_process_interval", "-1", "expected a number >= 0"),
    ("scheduler", "max_outbox", "many", "expected a whole number >= 1"),
    ("webserver", "workers", "2.5", "expected a whole number >= 1"),
    ("webserver", "workers", "0", "expected a whole number >= 1"),
    ("webserver", "workers", "4  # comment", "expected a whole number >= 1"),
    ("core", "load_examples", "maybe", "expected true/false, yes/no, on/off or 1/0"),
    ("core", "logging_level", "LOUD", "expected one of DEBUG, INFO, WARNING, ERROR"),
    ("api", "grpc_bind", "localhost", "expected host:port with a port in 1..65535"),
    ("api", "grpc_bind", ":50051", "expected host:port"),
    ("api", "grpc_bind", "host:0", "expected host:port"),
    ("api", "grpc_bind", "host:65536", "expected host:port"),
    ("api", "grpc_bind", "host:http", "expected host:port"),
    ("api", "grpc_bind", "::1:80", "expected host:port"),
    ("webserver", "bind", "", "expected host:port"),
    ("cluster", "nodes", "a:1,b", "'b' is not host:port"),
    ("cluster", "nodes", "", "expected at least one address"),
    ("cluster", "nodes", "a:1,a:1", "expected each address once"),
    ("worker", "servers", "a:1,b:x", "'b:x' is not host:port"),
    ("database", "url", "mysql://u@h/db", "expected a sqlite:///path or postgresql+psycopg://"),
    ("webserver", "worker_class", "", "expected a non-empty value"),
]


@pytest.mark.parametrize(("section", "key", "value", "allowed"), BAD_VALUES)
def test_bad_value_in_file(home: Path, section: str, key: str, value: str, allowed: str) -> None:
    err, file = load_error(home, f"[{section}]\n{key} = {value}\n")
    assert str(err).startswith(f"{file}: [{section}] {key} = {value!r}: ")
    assert allowed in str(err)
    assert (err.source, err.key, err.value) == (str(file), f"{section}.{key}", value)


@pytest.mark.parametrize(("section", "key", "value", "allowed"), BAD_VALUES[:4])
def test_bad_value_in_env_names_the_variable(
    home: Path, section: str, key: str, value: str, allowed: str
) -> None:
    var = f"RAFTSCHED__{section.upper()}__{key.upper()}"
    err, _ = load_error(home, "", **{var: value})
    assert str(err) == f"{var}: [{section}] {key} = {value!r}: {allowed}"
    assert err.source == var


def test_message_example_from_the_issue(home: Path) -> None:
    err, file = load_error(home, "[scheduler]\nscheduler_heartbeat_sec = abc\n")
    assert str(err) == (
        f"{file}: [scheduler] scheduler_heartbeat_sec = 'abc': expected a number > 0"
    )


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("[schedular]\n", {}, "FILE: [schedular]: unknown section (did you mean scheduler?);"),
        ("[DEFAULT]\nx = 1\n", {}, "FILE: [DEFAULT]: unknown section; sections are core,"),
        (
            "[scheduler]\nheartbeat_sec = 5\n",
            {},
            "FILE: [scheduler] heartbeat_sec: unknown key (did you mean scheduler_heartbeat_sec?)",
        ),
        ("", {"RAFTSCHED__SCHEDULAR__X": "1"}, "RAFTSCHED__SCHEDULAR__X: [schedular]: unknown"),
        ("", {"RAFTSCHED__CORE": "1"}, "RAFTSCHED__CORE: expected a name of the form"),
        (
            "",
            {"RAFTSCHED__WEBSERVER__SECRET_KY": "hunter2"},
            "RAFTSCHED__WEBSERVER__SECRET_KY: [webserver] secret_ky: unknown key"
            " (did you mean secret_key?); [webserver] keys are workers, worker_class,",
        ),
    ],
)
def test_unknown_section_or_key(home: Path, text: str, env: dict[str, str], expected: str) -> None:
    err, file = load_error(home, text, **env)
    assert str(err).startswith(expected.replace("FILE", str(file)))
    assert "hunter2" not in str(err)  # an unknown key may be a misspelt secret


CROSS_FIELD = [
    (
        "[cluster]\nself_address = 127.0.0.1:9999\n",
        "[cluster] self_address = '127.0.0.1:9999': expected one of [cluster] nodes:"
        " 127.0.0.1:7101, 127.0.0.1:7102, 127.0.0.1:7103",
    ),
    (
        "[cluster]\nnodes = 10.0.0.1:7101,127.0.0.1:7102\n",
        "[cluster] nodes = '10.0.0.1:7101,127.0.0.1:7102': an empty [cluster] secret is allowed"
        " only when every node is on loopback, and 10.0.0.1:7101 is not: set [cluster] secret",
    ),
    (
        "[cluster]\nnodes = db1:7101,db2:7101\nsecret =\n",
        "[cluster] secret = '': an empty [cluster] secret is allowed only when every node is on"
        " loopback, and db1:7101, db2:7101 is not: set [cluster] secret",
    ),
    (
        "[cluster]\nraft_min_timeout = 0.5\n",
        "[cluster] raft_min_timeout = '0.5': expected raft_min_timeout < raft_max_timeout"
        " (they are 0.5 and 0.45)",
    ),
    (
        "[cluster]\nraft_max_timeout = 0.15\n",
        "[cluster] raft_max_timeout = '0.15': expected raft_min_timeout < raft_max_timeout",
    ),
    (
        "[cluster]\nappend_entries_period = 0.2\n",
        "[cluster] append_entries_period = '0.2': expected append_entries_period <"
        " raft_min_timeout (they are 0.2 and 0.15)",
    ),
    (
        "[api]\ntls_cert = /etc/rs/cert.pem\n",
        "[api] tls_cert = '/etc/rs/cert.pem': tls_cert and tls_key go together: set both (TLS)"
        " or neither (plaintext)",
    ),
    ("[api]\ntls_key = key.pem\n", "[api] tls_key = 'key.pem': tls_cert and tls_key go together"),
    (
        "[api]\nadmin_tokens = a1,shared\nviewer_tokens = v1,shared\n",
        "[api] viewer_tokens = '***': a token may have one role; one of these is also in"
        " admin_tokens",
    ),
    (
        "[worker]\nheartbeat_interval = 30\n",
        "[worker] heartbeat_interval = '30': expected heartbeat_interval < lease_ttl"
        " (they are 30 and 10), or leases expire between heartbeats",
    ),
    ("[worker]\nlease_ttl = 2\n", "[worker] lease_ttl = '2': expected heartbeat_interval <"),
]


@pytest.mark.parametrize(("text", "expected"), CROSS_FIELD)
def test_rules_across_keys(home: Path, text: str, expected: str) -> None:
    err, file = load_error(home, text)
    assert str(err).startswith(f"{file}: {expected}")


def test_malformed_file_does_not_echo_its_lines(home: Path) -> None:
    err, file = load_error(home, "secret = hunter2\n")
    assert str(err) == f"{file}: line 1: expected a [section] header before the first key"
    err, file = load_error(home, "[cluster]\nhunter2\n")
    assert str(err).startswith(f"{file}: line 2: expected 'key = value'")
    assert "hunter2" not in str(err)


def test_duplicate_key_is_an_error(home: Path) -> None:
    err, file = load_error(home, "[core]\nload_examples = 1\nload_examples = 0\n")
    assert str(err).startswith(f"{file}: cannot read:")
    assert "load_examples" in str(err)


# -- immutability and secrets --------------------------------------------------------------


def test_config_is_immutable(home: Path) -> None:
    cfg = default_config(home)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scheduler.max_outbox = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scheduler = cfg.scheduler  # type: ignore[misc]
    assert isinstance(cfg.cluster.nodes, tuple) and isinstance(cfg.api.admin_tokens, tuple)
    assert hash(cfg) == hash(default_config(home))


SECRETS = {
    "RAFTSCHED__CLUSTER__SECRET": "raft-pw-1",
    "RAFTSCHED__API__ADMIN_TOKENS": "adm-tok-1,adm-tok-2",
    "RAFTSCHED__API__OPERATOR_TOKENS": "op-tok-1",
    "RAFTSCHED__API__VIEWER_TOKENS": "view-tok-1",
    "RAFTSCHED__API__WORKER_TOKENS": "wrk-tok-1",
    "RAFTSCHED__WEBSERVER__SECRET_KEY": "web-key-1",
    "RAFTSCHED__WORKER__TOKEN": "wrk-tok-1b",
    "RAFTSCHED__DATABASE__URL": "postgresql+psycopg://rs:db-pw-1@db:5432/rs",
}
SECRET_VALUES = ["raft-pw-1", "adm-tok", "op-tok", "view-tok", "wrk-tok", "web-key", "db-pw"]


def test_secrets_never_shown(home: Path) -> None:
    cfg = load_config(env={"RAFTSCHED_HOME": str(home), **SECRETS})
    assert cfg.cluster.secret == "raft-pw-1"  # still usable by the code that needs them
    assert cfg.api.admin_tokens == ("adm-tok-1", "adm-tok-2")
    assert "db-pw-1" in cfg.database.url
    shown = cfg.redacted()
    for text in (repr(cfg), str(cfg), json.dumps(shown), repr(cfg.api), str(cfg.database)):
        for secret in SECRET_VALUES:
            assert secret not in text
    assert shown["cluster"]["secret"] == "***"
    assert shown["api"]["admin_tokens"] == ["***", "***"]
    assert shown["webserver"]["secret_key"] == "***"
    assert shown["database"]["url"] == "postgresql+psycopg://rs:***@db:5432/rs"
    assert shown["scheduler"]["scheduler_heartbeat_sec"] == 5.0
    assert shown["source"] == "defaults"
    secret_fields = {f.name for f in dataclasses.fields(cfg.api) if not f.repr}
    assert secret_fields == {"admin_tokens", "operator_tokens", "viewer_tokens", "worker_tokens"}


def test_secrets_never_in_error_messages(home: Path) -> None:
    err, _ = load_error(
        home, "", RAFTSCHED__DATABASE__URL="mysql://rs:db-pw-1@db/rs?password=db-pw-2"
    )
    assert "db-pw" not in str(err) and "db-pw" not in err.value
    assert "mysql://rs:***@db/rs?password=***" in str(err)


# -- the example file ----------------------------------------------------------------------


def test_example_lists_exactly_the_defined_keys() -> None:
    parser = configparser.ConfigParser(interpolation=None, default_section="\0")
    parser.read(EXAMPLE, encoding="utf-8")
    listed = {section: tuple(parser[section]) for section in parser.sections()}
    assert listed == KEYS
    assert set(KEYS) == set(SECTIONS)


def test_example_parses_to_the_defaults(home: Path) -> None:
    cfg = load_config(EXAMPLE, env={"RAFTSCHED_HOME": str(home)})
    assert cfg == dataclasses.replace(default_config(home), source=str(EXAMPLE))


def test_every_key_in_the_example_has_a_comment() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if line and line[0].isalpha():
            assert lines[number - 1].startswith("#"), f"line {number + 1} has no comment: {line}"
