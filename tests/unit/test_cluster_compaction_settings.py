"""Log compaction thresholds come from the config, and nodes never compact in lockstep: each
node's first compaction is later by its rank among the members (raft/settings.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftsched.config import load_config
from raftsched.errors import ConfigError
from raftsched.raft.settings import (
    RaftSettings,
    build_conf,
    compaction_offset,
    settings_from_config,
)

NODES = ("127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103")


def settings(tmp_path: Path, address: str = NODES[0], **extra: Any) -> RaftSettings:
    return RaftSettings(self_address=address, nodes=NODES, secret="", data_dir=tmp_path, **extra)


def env(tmp_path: Path, **keys: str) -> dict[str, str]:
    out = {"RAFTSCHED_HOME": str(tmp_path), "RAFTSCHED__CLUSTER__SELF_ADDRESS": NODES[1]}
    out.update({f"RAFTSCHED__CLUSTER__{k.upper()}": v for k, v in keys.items()})
    return out


def test_defaults_are_pysyncobjs_and_three_seconds_of_handover(tmp_path: Path) -> None:
    got = settings_from_config(load_config(None, env(tmp_path)))
    assert (got.log_compaction_min_entries, got.log_compaction_min_time) == (5000, 300.0)
    assert got.handover_timeout == 3.0


def test_the_config_sets_the_thresholds_and_the_handover_timeout(tmp_path: Path) -> None:
    keys = {
        "compaction_min_entries": "20000",
        "compaction_min_seconds": "600",
        "handover_timeout": "0",
    }
    got = settings_from_config(load_config(None, env(tmp_path, **keys)))
    assert (got.log_compaction_min_entries, got.log_compaction_min_time) == (20000, 600.0)
    assert got.handover_timeout == 0.0
    conf = build_conf(got, serializer=lambda _f, _d: None)
    conf.serializer("dump", None)  # after the first compaction: the configured thresholds
    assert (conf.logCompactionMinEntries, conf.logCompactionMinTime) == (20000, 600.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("compaction_min_entries", "1"),
        ("compaction_min_entries", "many"),
        ("compaction_min_seconds", "0"),
        ("handover_timeout", "-1"),
        ("handover_timeout", "31"),
    ],
)
def test_bad_values_stop_the_node_at_start_naming_the_key(
    tmp_path: Path, key: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(None, env(tmp_path, **{key: value}))


def test_settings_built_by_hand_are_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="compaction_min_entries"):
        settings(tmp_path, log_compaction_min_entries=1).validate()
    with pytest.raises(ConfigError, match="compaction_min_seconds"):
        settings(tmp_path, log_compaction_min_time=0).validate()
    with pytest.raises(ConfigError, match="handover_timeout"):
        settings(tmp_path, handover_timeout=-0.5).validate()


def test_offsets_are_the_ranks_among_the_members_in_any_order() -> None:
    assert [compaction_offset(a, NODES) for a in NODES] == [0.0, 1 / 3, 2 / 3]
    shuffled = (NODES[2], NODES[0], NODES[1])
    assert [compaction_offset(a, shuffled) for a in NODES] == [0.0, 1 / 3, 2 / 3]
    five = tuple(f"10.0.0.{i}:7101" for i in range(1, 6))
    offsets = [compaction_offset(a, five) for a in five]
    assert sorted(offsets) == [i / 5 for i in range(5)]  # evenly spread, none shared


def test_first_compactions_are_spread_then_every_node_keeps_the_period(tmp_path: Path) -> None:
    firsts = []
    for address in NODES:
        calls: list[str] = []
        node = settings(tmp_path, address, log_compaction_min_entries=6000)
        conf = build_conf(
            node,
            serializer=lambda f, _d, calls=calls: calls.append(f),
            deserializer=lambda _f: None,
        )
        conf.validate()
        firsts.append((conf.logCompactionMinEntries, conf.logCompactionMinTime))
        conf.serializer("raft.dump", ("raft data",))
        assert calls == ["raft.dump"]  # the node's own serializer still writes the snapshot
        assert (conf.logCompactionMinEntries, conf.logCompactionMinTime) == (6000, 300.0)
    # 1/3 of a period apart: by entries (6000, 8000, 10000) and by time (300, 400, 500 s)
    assert [entries for entries, _ in firsts] == [6000, 8000, 10000]
    assert [round(seconds, 6) for _, seconds in firsts] == [300.0, 400.0, 500.0]


def test_without_a_serializer_the_conf_is_left_alone(tmp_path: Path) -> None:
    conf = build_conf(settings(tmp_path, NODES[2]))
    assert conf.serializer is None
    assert conf.logCompactionMinEntries == 5000 + int(5000 * 2 / 3)


def test_a_refused_first_compaction_keeps_the_offset(tmp_path: Path) -> None:
    def refuse(_filename: str, _data: object) -> None:
        raise RuntimeError("a snapshot is already being written")

    conf = build_conf(settings(tmp_path, NODES[1]), serializer=refuse, deserializer=lambda _f: None)
    with pytest.raises(RuntimeError):
        conf.serializer("raft.dump", None)
    assert (conf.logCompactionMinEntries, conf.logCompactionMinTime) == (6666, 400.0)
