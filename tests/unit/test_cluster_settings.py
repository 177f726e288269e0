"""Raft settings from the config: addresses, secret, timings, files, admin address."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from raftsched.addresses import (
    admin_address_for,
    admin_bind_for,
    api_address_for,
    api_bind_for,
    is_loopback,
)
from raftsched.errors import ConfigError
from raftsched.raft.settings import RaftSettings, build_conf, settings_from_config

NODES = ("127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103")


def make(tmp_path: Path, **overrides: object) -> RaftSettings:
    fields: dict[str, object] = {
        "self_address": NODES[0],
        "nodes": NODES,
        "secret": "s3cret",
        "data_dir": tmp_path,
    }
    fields.update(overrides)
    return RaftSettings(**fields)  # type: ignore[arg-type]


def test_conf_binds_explicitly_and_encrypts(tmp_path: Path) -> None:
    settings = make(tmp_path)
    settings.validate()
    conf = build_conf(settings)
    conf.validate()
    assert conf.bindAddress == "127.0.0.1:7101"
    assert conf.password == "s3cret"
    assert conf.useFork is False
    assert conf.dynamicMembershipChange is True
    assert conf.commandsWaitLeader is True
    assert conf.appendEntriesUseBatch is False
    assert (conf.raftMinTimeout, conf.raftMaxTimeout) == (0.15, 0.45)
    assert conf.appendEntriesPeriod == 0.03
    assert conf.leaderFallbackTimeout == 1.5
    assert conf.journalFile == str(tmp_path / "127.0.0.1_7101" / "raft.journal")
    assert conf.fullDumpFile == str(tmp_path / "127.0.0.1_7101" / "raft.dump")
    assert settings.partners == NODES[1:]


def test_empty_secret_only_on_loopback(tmp_path: Path) -> None:
    make(tmp_path, secret="").validate()
    assert build_conf(make(tmp_path, secret="")).password is None
    remote = ("10.0.0.1:7101", "10.0.0.2:7101", "10.0.0.3:7101")
    with pytest.raises(ConfigError, match=r"\[cluster\] secret"):
        make(tmp_path, secret="", nodes=remote, self_address=remote[0]).validate()
    make(tmp_path, nodes=remote, self_address=remote[0]).validate()


def test_self_address_must_be_a_member(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not one of"):
        make(tmp_path, self_address="127.0.0.1:9999").validate()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("raft_min_timeout", 0.08),  # not > 3 * append_entries_period
        ("raft_max_timeout", 0.1),  # not > raft_min_timeout
        ("connection_timeout", 0.2),  # not >= raft_max_timeout
        ("leader_fallback_timeout", 0.01),  # not > append_entries_period
    ],
)
def test_timing_order_is_checked(tmp_path: Path, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match="must satisfy"):
        make(tmp_path, **{key: value}).validate()


def test_bad_address(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        make(tmp_path, nodes=(*NODES, "nohost")).validate()


def test_secret_not_in_repr(tmp_path: Path) -> None:
    assert "s3cret" not in repr(make(tmp_path))


def test_admin_address() -> None:
    assert admin_bind_for("127.0.0.1:7101") == "127.0.0.1:7201"
    assert admin_bind_for("127.0.0.1:7101", "0.0.0.0:9000") == "0.0.0.0:9000"
    # clients dial a node at its Raft host and the bind's port
    assert admin_address_for("10.0.0.2:7101", "0.0.0.0:9000") == "10.0.0.2:9000"
    assert api_address_for("10.0.0.2:7101") == "10.0.0.2:7301"
    assert api_bind_for("10.0.0.2:7101", "0.0.0.0:50051") == "0.0.0.0:50051"
    assert api_address_for("10.0.0.2:7101", "0.0.0.0:50051") == "10.0.0.2:50051"
    assert is_loopback("127.0.0.1:1") and is_loopback("localhost:1") and is_loopback("[::1]:1")
    assert not is_loopback("10.1.2.3:7101")


def _config(tmp_path: Path, **cluster: object) -> SimpleNamespace:
    fields: dict[str, object] = {
        "nodes": NODES,
        "self_address": "",
        "secret": "x",
        "data_dir": tmp_path,
        "raft_min_timeout": 0.15,
        "raft_max_timeout": 0.45,
        "append_entries_period": 0.04,
        "connection_timeout": 1.0,
        "connection_retry_time": 1.0,
        "leader_fallback_timeout": 1.5,
        "commit_timeout": 5.0,
        "admin_bind": "",
    }
    fields.update(cluster)
    return SimpleNamespace(cluster=SimpleNamespace(**fields))


def test_from_config_address_flag_wins(tmp_path: Path) -> None:
    config = _config(tmp_path, self_address=NODES[1])
    assert settings_from_config(config).self_address == NODES[1]
    assert settings_from_config(config, self_address=NODES[2]).self_address == NODES[2]
    with pytest.raises(ConfigError, match="--address"):
        settings_from_config(_config(tmp_path))


def test_from_real_config(tmp_path: Path) -> None:
    config_mod = pytest.importorskip("raftsched.config")
    config = config_mod.load_config(
        None,
        env={
            "RAFTSCHED_HOME": str(tmp_path),
            "RAFTSCHED__CLUSTER__SELF_ADDRESS": "127.0.0.1:7102",
        },
    )
    settings = settings_from_config(config)
    assert settings.self_address == "127.0.0.1:7102"
    assert settings.node_dir.parent == config.cluster.data_dir
