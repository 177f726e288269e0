"""Every documented config key is real, and the README's hand-run cluster config starts.

- raftsched.cfg.example and the config schema (raftsched/config.py) list the same sections and
  keys, with the same defaults, so no key is documented but unknown, or known but undocumented.
- Each key of the schema is read somewhere outside config.py (a key nothing reads is a
  promise nothing keeps).
- The keys whose reading was added later have a behaviour test each (catchup_by_default,
  dags_are_paused_at_creation, load_examples).
- README "Running a cluster by hand": its config block, placeholders filled, loads through the
  real loader and passes the start-up checks a node, a webserver and a worker make on a
  non-loopback address. No process is started.
"""

from __future__ import annotations

import argparse
import configparser
import re
import secrets
from dataclasses import fields
from pathlib import Path

import pytest

from raftsched import config as cfg
from raftsched import config_schema as s
from raftsched.addresses import api_bind_for, is_loopback

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "raftsched.cfg.example"


# -- the example file and the schema -------------------------------------------------------


def example() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, default_section="\0")
    parser.read(EXAMPLE, encoding="utf-8")
    return parser


def test_the_example_documents_exactly_the_schema() -> None:
    parser = example()
    assert parser.sections() == list(cfg.SECTIONS)
    for section, keys in cfg.KEYS.items():
        documented = [key for key, _ in parser.items(section)]
        assert documented == list(keys), f"[{section}]: example {documented} != schema {keys}"


def test_the_example_shows_every_default() -> None:
    parser = example()
    for section, cls in cfg.SECTIONS.items():
        for f in fields(cls):  # type: ignore[arg-type]
            assert parser.get(section, f.name) == s.spec_of(f).default, f"[{section}] {f.name}"


def test_the_example_loads_and_equals_the_defaults(tmp_path: Path) -> None:
    env = {"RAFTSCHED_HOME": str(tmp_path)}
    loaded = cfg.load_config(EXAMPLE, env)
    defaults = cfg.default_config(tmp_path)
    for section in cfg.SECTIONS:
        assert getattr(loaded, section) == getattr(defaults, section), section


# Keys read by a name built at run time. Add one here only with where it is read.
READ_INDIRECTLY: dict[str, str] = {
    f"api.{role}_tokens": "raftsched/api/auth.py TokenTable.from_config: f'{role}_tokens'"
    for role in ("admin", "operator", "viewer", "worker")
}


def _sources() -> str:
    skip = {ROOT / "raftsched" / "config.py", ROOT / "raftsched" / "config_schema.py"}
    files = [*(ROOT / "raftsched").rglob("*.py"), *(ROOT / "web").rglob("*.py")]
    return "\n".join(p.read_text(encoding="utf-8") for p in files if p not in skip)


def test_every_key_is_read_outside_the_config_module() -> None:
    text = _sources()
    unread = []
    for section, keys in cfg.KEYS.items():
        for key in keys:
            if f"{section}.{key}" in READ_INDIRECTLY:
                continue
            # config.<section>.<key>, settings.<key>, ["<key>"], getattr(x, "<key>") all count
            if not re.search(rf"(\.|[\"']){re.escape(key)}\b", text):
                unread.append(f"[{section}] {key}")
    assert not unread, f"documented but never read: {unread}"


# -- README "Running a cluster by hand" -----------------------------------------------------


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.fixture
def readme_config(tmp_path: Path) -> tuple[Path, str]:
    section = readme_section("Running a cluster by hand")
    block = re.search(r"```ini\n(.*?)```", section, re.S)
    assert block, "no ini block in README 'Running a cluster by hand'"
    from cryptography.fernet import Fernet

    # Each placeholder as the README says to make it: a Fernet key, else a random string.
    values: dict[str, str] = {"<fernet key>": Fernet.generate_key().decode()}
    fill = lambda m: values.setdefault(m[0], secrets.token_urlsafe(24))  # noqa: E731
    text = re.sub(r"<[^<>\n]+>", fill, block.group(1))
    commands = re.sub(r"<[^<>\n]+>", fill, section[block.end() :])
    path = tmp_path / "raftsched.cfg"
    path.write_text(text.replace("/srv/dags", str(tmp_path / "dags")))
    return path, commands


def test_the_readme_cluster_config_passes_the_start_up_checks(
    readme_config: tuple[Path, str], tmp_path: Path
) -> None:
    from raftsched.api.auth import check_open_allowed
    from raftsched.cli import webserver_cmd, worker_cmd

    path, _ = readme_config
    env = {"RAFTSCHED_HOME": str(tmp_path)}
    config = cfg.load_config(path, env)
    nodes = config.cluster.nodes
    assert len(nodes) == 3 and not any(is_loopback(n) for n in nodes), "a multi-machine example"
    for node in nodes:  # what every `raftsched scheduler --address NODE` checks at start
        cfg.load_config(path, {**env, "RAFTSCHED__CLUSTER__SELF_ADDRESS": node})
        bind = api_bind_for(node, config.api.grpc_bind)
        assert not is_loopback(bind)
        check_open_allowed(config.api, bind)  # raises ConfigError without tokens
    webserver_cmd.check({"RAFTSCHED_CONFIG": str(path), **env})  # [webserver] secret_key
    assert config.webserver.token in config.api.admin_tokens, "the webserver needs an admin token"
    args = argparse.Namespace(config=str(path), server=None, token=None)
    servers, token = worker_cmd.resolve(args, env)
    assert token in config.api.worker_tokens, "workers need a worker token"
    assert servers == [api_bind_for(n, config.api.grpc_bind) for n in nodes]
    # Variables and connections: a node without a usable key refuses them.
    from raftsched.secrets import SecretBox

    box = SecretBox(config.secrets.fernet_key)
    assert box.decrypt(box.encrypt("value")) == "value"


def test_without_tokens_that_config_would_be_refused(
    readme_config: tuple[Path, str], tmp_path: Path
) -> None:
    """The check above can fail: the README's old example (no [api] tokens, no secret_key)."""
    from raftsched.api.auth import check_open_allowed
    from raftsched.cli import webserver_cmd
    from raftsched.errors import ConfigError

    path, _ = readme_config
    old = re.sub(r"(?ms)^\[(api|webserver|worker)\]\n(?:[^\[].*?\n)*", "", path.read_text())
    path.write_text(old)
    env = {"RAFTSCHED_HOME": str(tmp_path)}
    config = cfg.load_config(path, env)
    with pytest.raises(ConfigError):
        check_open_allowed(config.api, api_bind_for(config.cluster.nodes[0]))
    with pytest.raises(ConfigError):
        webserver_cmd.check({"RAFTSCHED_CONFIG": str(path), **env})


def test_the_readme_cluster_commands_parse(readme_config: tuple[Path, str]) -> None:
    import shlex

    from raftsched.cli.main import build_parser, parse_args

    _, commands = readme_config
    lines = [
        shlex.split(line.strip(), comments=True)
        for line in commands.splitlines()
        if line.startswith("    raftsched ")
    ]
    assert len(lines) >= 6
    for words in lines:
        args = parse_args(words[1:], build_parser())
        assert args.handler is not None and args.config == "raftsched.cfg", words


# -- behaviour of the keys that were documented before anything read them ----------------

DAG_FILE = """\
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("unsaid", schedule="@daily", start_date=datetime(2024, 1, 1)):
    BashTask("t", command="true")
with DAG("said", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    BashTask("t", command="true")
"""


@pytest.mark.parametrize("default", [True, False])
def test_catchup_by_default_is_what_a_dag_without_catchup_gets(
    tmp_path: Path, default: bool
) -> None:
    from raftsched.dags.parser import parse_file

    path = tmp_path / "dags.py"
    path.write_text(DAG_FILE)
    result = parse_file(path, timeout=30, output_limit=65536, catchup_by_default=default)
    assert not result.errors, result.errors
    catchup = {spec.dag_id: spec.catchup for spec in result.specs}
    assert catchup == {"unsaid": default, "said": False}


def test_scheduler_keys_reach_the_leader_loop(tmp_path: Path) -> None:
    from raftsched.cluster.runtime import NodeRuntime

    path = tmp_path / "raftsched.cfg"
    path.write_text(
        f"[core]\nhome = {tmp_path}\n"
        "[scheduler]\ncatchup_by_default = true\ndags_are_paused_at_creation = true\n"
    )
    runtime = NodeRuntime.from_config(cfg.load_config(path, {}))  # starts nothing
    try:
        assert runtime.loop_settings.catchup_by_default is True
        assert runtime.loop_settings.dags_are_paused_at_creation is True
    finally:
        if runtime.engine is not None:
            runtime.engine.dispose()
    defaults = cfg.default_config(tmp_path).scheduler
    assert (defaults.catchup_by_default, defaults.dags_are_paused_at_creation) == (False, False)


@pytest.mark.parametrize("paused", [True, False])
def test_dags_are_paused_at_creation(paused: bool) -> None:
    from datetime import datetime

    from raftsched.cluster.leader import _dag_changes
    from raftsched.cluster.proposer import Proposer
    from raftsched.core.commands import RegisterDags
    from raftsched.core.state import SchedulerState
    from raftsched.dags.authoring import DAG, BashTask

    with DAG("new", schedule="@daily", start_date=datetime(2024, 1, 1)) as dag:
        BashTask("t", command="true")
    state = SchedulerState()
    proposer = Proposer(None, commit_timeout=1)  # type: ignore[arg-type]  # only make() is used
    commands = _dag_changes(proposer, state, [dag.to_spec()], [], paused)
    assert [type(c) for c in commands] == [RegisterDags]
    assert commands[0].paused_at_creation is paused  # type: ignore[attr-defined]
    state.apply(commands[0], log_index=1)
    assert state.dags["new"].paused is paused


@pytest.mark.parametrize("load_examples", [True, False])
def test_load_examples_decides_whether_standalone_copies_them(
    tmp_path: Path, load_examples: bool
) -> None:
    from raftsched.cli.standalone_cmd import seed_dags_folder

    dags = tmp_path / "dags"
    copied = seed_dags_folder(dags, load_examples)
    assert dags.is_dir()
    files = sorted(p.name for p in dags.iterdir())
    assert (copied > 0) is load_examples and len(files) == copied


def test_standalone_writes_a_config_that_copies_the_examples(tmp_path: Path) -> None:
    from raftsched.cli.standalone_cmd import initial_config

    path = tmp_path / "raftsched.cfg"
    path.write_text(initial_config(tmp_path, ["127.0.0.1:7101"]))
    assert cfg.load_config(path, {}).core.load_examples is True
