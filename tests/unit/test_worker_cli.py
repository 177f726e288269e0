"""`raftsched worker` flags: where servers and token come from, and usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched.cli.main import build_parser
from raftsched.cli.worker_cmd import resolve


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "raftsched.cfg"
    path.write_text("[worker]\nservers = 10.0.0.1:50051,10.0.0.2:50051\ntoken = from-config\n")
    return path


def parse(*argv: str) -> object:
    return build_parser().parse_args(list(argv))


def test_flags_win_over_env_and_env_over_config(config_file: Path) -> None:
    env = {"RAFTSCHED_SERVER": "envhost:1", "RAFTSCHED_TOKEN": "from-env"}
    args = parse("--config", str(config_file), "worker", "--server", "a:1, b:2", "--token", "t")
    assert resolve(args, env) == (["a:1", "b:2"], "t")  # type: ignore[arg-type]
    args = parse("--config", str(config_file), "worker")
    assert resolve(args, env) == (["envhost:1"], "from-env")  # type: ignore[arg-type]
    assert resolve(args, {}) == (["10.0.0.1:50051", "10.0.0.2:50051"], "from-config")  # type: ignore[arg-type]


def test_without_servers_the_worker_uses_the_clusters_api_addresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAFTSCHED_HOME", str(tmp_path))
    for var in ("RAFTSCHED_SERVER", "RAFTSCHED_CONFIG", "RAFTSCHED__WORKER__SERVERS"):
        monkeypatch.delenv(var, raising=False)
    config_file = tmp_path / "raftsched.cfg"
    config_file.write_text("[cluster]\nnodes = 127.0.0.1:7101,127.0.0.1:7102\n")
    args = parse("--config", str(config_file), "worker")
    servers, _ = resolve(args, {})  # type: ignore[arg-type]
    assert servers == ["127.0.0.1:7301", "127.0.0.1:7302"]


def test_concurrency_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("worker", "--concurrency", "0")
    assert exit_info.value.code == 2
    assert "expected a whole number >= 1" in capsys.readouterr().err


def test_queues_flag_takes_names_each_once_and_refuses_bad_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse("worker", "--queues", "gpu, default,gpu")
    assert args.queues == ("gpu", "default")  # type: ignore[attr-defined]
    assert parse("worker").queues is None  # type: ignore[attr-defined]  # [worker] queues then
    for bad in ("a b", ",", "x" * 251):
        with pytest.raises(SystemExit):
            parse("worker", "--queues", bad)
    assert "invalid queue 'a b'" in capsys.readouterr().err
