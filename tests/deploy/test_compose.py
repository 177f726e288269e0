"""docker-compose.yml, read as YAML: the services fit together.

No Docker engine runs here, so this is structural: every service a production cluster needs
is there with a restart policy and a health check; the Raft node list names exactly the
scheduler services; webservers and workers point at every node's gRPC port and hold no
secret they do not need; nginx's mounted config is fresh and lists both webservers.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import run_webservers  # noqa: E402

from raftsched.cli.main import build_parser, parse_args  # noqa: E402

RAFT_PORT = 7101
API_OFFSET = 200
WEB_PORT = 8080
LONG_RUNNING = ("always", "unless-stopped")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def named(services: dict[str, dict[str, Any]], prefix: str) -> list[str]:
    return sorted(name for name in services if re.fullmatch(rf"{prefix}-\d+", name))


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {key: str(value) for key, value in raw.items()}


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else list(cmd)


def flag(cmd: list[str], name: str) -> str:
    assert name in cmd, f"{name} missing from {cmd}"
    return cmd[cmd.index(name) + 1]


def csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def healthcheck_text(service: dict[str, Any]) -> str:
    check = service.get("healthcheck")
    assert check and not check.get("disable"), "no health check"
    test = check["test"]
    return " ".join(test) if isinstance(test, list) else str(test)


def test_every_service_is_there(services: dict[str, dict[str, Any]]) -> None:
    assert "postgres" in services
    assert "nginx" in services
    assert "migrate" in services
    assert len(named(services, "scheduler")) == 3
    assert len(named(services, "web")) == 2
    assert len(named(services, "worker")) == 2


def test_restart_policies(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        policy = service.get("restart")
        if name == "migrate":
            assert policy == "on-failure", "the one-shot migration retries only on failure"
        else:
            assert policy in LONG_RUNNING, f"{name}: restart is {policy!r}"


def test_health_checks(services: dict[str, dict[str, Any]]) -> None:
    assert "pg_isready" in healthcheck_text(services["postgres"])
    for name in named(services, "scheduler"):
        text = healthcheck_text(services[name])
        assert "grpc_health" in text and f"{name}:{RAFT_PORT + API_OFFSET}" in text, name
    for name in named(services, "web"):
        assert f"127.0.0.1:{WEB_PORT}/health" in healthcheck_text(services[name]), name
    assert "/lb-health" in healthcheck_text(services["nginx"])
    for name in named(services, "worker"):
        assert "grpc_health" in healthcheck_text(services[name]), name


def test_raft_nodes_match_the_scheduler_services(services: dict[str, dict[str, Any]]) -> None:
    schedulers = named(services, "scheduler")
    expected = {f"{name}:{RAFT_PORT}" for name in schedulers}
    secrets = set()
    for name in schedulers:
        service = services[name]
        values = env(service)
        nodes = csv(values["RAFTSCHED__CLUSTER__NODES"])
        assert len(nodes) == len(set(nodes)) and set(nodes) == expected, name
        address = flag(command(service), "--address")
        assert address == f"{name}:{RAFT_PORT}", f"{name} runs as {address}"
        assert service.get("hostname", name) == name
        secrets.add(values["RAFTSCHED__CLUSTER__SECRET"])
        assert "@postgres:5432/" in values["RAFTSCHED__DATABASE__URL"]
        volumes = [str(v) for v in service.get("volumes", [])]
        assert any(v.endswith(":/var/lib/raftsched/data") for v in volumes), (
            f"{name}: its Raft journal must live on a volume of its own"
        )
    assert len(secrets) == 1, "every node needs the same Raft secret"
    journals = [
        v.split(":")[0]
        for name in schedulers
        for v in map(str, services[name]["volumes"])
        if v.endswith(":/var/lib/raftsched/data")
    ]
    assert len(set(journals)) == len(schedulers), "nodes must not share a journal volume"


def test_scheduler_grpc_ports_are_published_on_loopback(
    services: dict[str, dict[str, Any]],
) -> None:
    published = []
    for name in named(services, "scheduler"):
        ports = [str(p) for p in services[name].get("ports", [])]
        assert len(ports) == 1, name
        host_ip, host_port, container_port = ports[0].split(":")
        assert host_ip == "127.0.0.1" and int(container_port) == RAFT_PORT + API_OFFSET
        published.append(host_port)
    assert len(set(published)) == len(published)


def test_webservers_and_workers_reach_every_node_over_grpc(
    services: dict[str, dict[str, Any]],
) -> None:
    grpc = {f"{name}:{RAFT_PORT + API_OFFSET}" for name in named(services, "scheduler")}
    web_keys = set()
    for name in named(services, "web"):
        values = env(services[name])
        assert set(csv(values["RAFTSCHED__WEBSERVER__GRPC_SERVERS"])) == grpc, name
        assert values["RAFTSCHED__WEBSERVER__TOKEN"]
        web_keys.add(values["RAFTSCHED__WEBSERVER__SECRET_KEY"])
        assert flag(command(services[name]), "--bind") == f"0.0.0.0:{WEB_PORT}"
    assert len(web_keys) == 1, "session cookies need one secret_key on every webserver"
    for name in named(services, "worker"):
        values = env(services[name])
        assert set(csv(values["RAFTSCHED__WORKER__SERVERS"])) == grpc, name
        assert values["RAFTSCHED__WORKER__TOKEN"]
        assert command(services[name])[0] == "worker"


def test_least_privilege(services: dict[str, dict[str, Any]]) -> None:
    """Webservers and workers get neither the Raft secret nor the database."""
    for name in [*named(services, "web"), *named(services, "worker")]:
        keys = set(env(services[name]))
        assert not keys & {"RAFTSCHED__CLUSTER__SECRET", "RAFTSCHED__DATABASE__URL"}, name
        # [cluster] nodes off loopback would demand the secret; they use gRPC addresses only.
        assert "RAFTSCHED__CLUSTER__NODES" not in keys, name


def test_secrets_come_from_the_environment(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for key, value in env(service).items():
            if re.search(r"SECRET|TOKEN|PASSWORD", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", value), f"{name}: {key}={value}"


def test_every_scheduler_node_has_the_same_fernet_key(services: dict[str, dict[str, Any]]) -> None:
    """Without [secrets] fernet_key a node refuses every variable and connection."""
    keys = {
        env(services[name]).get("RAFTSCHED__SECRETS__FERNET_KEY")
        for name in named(services, "scheduler")
    }
    assert len(keys) == 1 and None not in keys, keys
    for name in [*named(services, "web"), *named(services, "worker")]:
        assert "RAFTSCHED__SECRETS__FERNET_KEY" not in env(services[name]), name


def test_every_required_variable_is_documented() -> None:
    """Each `${VAR:?}` is in the header's and the README's export lines: a variable compose
    demands but the instructions never mention stops `docker compose up` cold."""
    text = (ROOT / "docker-compose.yml").read_text()
    lines = text.splitlines()
    body = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    required = set(re.findall(r"\$\{([A-Z_]+):\?", body))
    header = "\n".join(line for line in lines if line.startswith("#"))
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Deploying with Docker Compose\n")
    section = readme[start : readme.index("\n## ", start + 1)]
    assert "RAFTSCHED_FERNET_KEY" in required
    for where, doc in (("docker-compose.yml's header", header), ("the README", section)):
        exported = set(re.findall(r"\b([A-Z_]+)=\.\.\.", doc))
        assert required <= exported, f"{where} lacks {sorted(required - exported)}"


def test_dags_folder_is_shared_at_one_path(services: dict[str, dict[str, Any]]) -> None:
    mounts = set()
    for name in [*named(services, "scheduler"), *named(services, "worker")]:
        values = env(services[name])
        volumes = [str(v) for v in services[name].get("volumes", [])]
        dags = [v for v in volumes if ":/var/lib/raftsched/dags" in v]
        assert len(dags) == 1, f"{name}: {volumes}"
        mounts.add(dags[0])
        if name.startswith("scheduler"):
            assert values["RAFTSCHED__CORE__DAGS_FOLDER"] == "/var/lib/raftsched/dags"
    assert len(mounts) == 1, f"schedulers and workers must see the same DAG files: {mounts}"


def test_depends_on_order(services: dict[str, dict[str, Any]]) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in named(services, "scheduler"):
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert set(services["nginx"]["depends_on"]) == set(named(services, "web"))


def test_nginx_serves_both_webservers_from_a_fresh_config(
    services: dict[str, dict[str, Any]],
) -> None:
    nginx = services["nginx"]
    assert any(str(p).split(":")[-1] == str(WEB_PORT) for p in nginx["ports"])
    mount = next(str(v) for v in nginx["volumes"] if str(v).endswith(":/etc/nginx/nginx.conf:ro"))
    conf_path = ROOT / mount.split(":")[0]
    text = conf_path.read_text()
    upstream = re.search(r"upstream raftsched_web \{(.*?)\n    \}", text, re.S)
    assert upstream, "no upstream block"
    servers = re.findall(r"^\s*server (\S+)", upstream.group(1), re.M)
    assert servers == [f"{name}:{WEB_PORT}" for name in named(services, "web")]
    assert "add_header X-Upstream $upstream_addr always;" in text
    assert re.search(r"^\s*proxy_next_upstream error timeout;", text, re.M)
    assert text == run_webservers.compose_conf_text(tuple(servers)), (
        f"{conf_path} is stale: run python scripts/run_webservers.py --write-compose-conf"
    )


def test_dockerfile_runs_raftsched_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert re.search(r'^ENTRYPOINT \["raftsched"\]', text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "COPY web " in text, "the webserver package (raftsched.web) lives in web/"


# -- every raftsched command line in the file parses with the real CLI -----------------------

IMAGE = "raftsched:local"  # its ENTRYPOINT is ["raftsched"]


def raftsched_services(services: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, service in services.items() if service.get("image") == IMAGE}


def commented_command_lines(text: str, services: set[str]) -> list[list[str]]:
    """The argv (after ``raftsched``) of each command in the comments: ``raftsched ...`` and
    ``docker compose run [--rm] SERVICE ...`` / ``docker run [--rm] raftsched:local ...``."""
    found = []
    for line in text.splitlines():
        match = re.match(r"\s*#+\s{2,}((?:raftsched|docker) .*)", line)  # indented: a command
        if not match:
            continue
        words = shlex.split(match.group(1), comments=True)
        if words[:1] == ["raftsched"]:
            found.append(words[1:])
        elif words[:3] == ["docker", "compose", "run"] or words[:2] == ["docker", "run"]:
            rest = [w for w in words[words.index("run") + 1 :] if w != "--rm"]
            if rest and (rest[0] in services or rest[0] == IMAGE):
                found.append(rest[1:])
    return found


def parses(argv: list[str]) -> None:
    """The real parser accepts ``argv`` and it names a command that runs (not a bare group)."""
    parser = build_parser()
    try:
        args = parse_args(argv, parser)
    except SystemExit as exc:
        assert exc.code == 0 and "--help" in argv, f"raftsched {shlex.join(argv)}: usage error"
        return
    assert getattr(args, "handler", None) is not None, f"raftsched {shlex.join(argv)}"
    assert args.command, argv


def test_every_command_in_the_comments_parses(services: dict[str, dict[str, Any]]) -> None:
    lines = commented_command_lines(
        (ROOT / "docker-compose.yml").read_text(), raftsched_services(services)
    )
    lines += commented_command_lines((ROOT / "Dockerfile").read_text(), set())
    assert len(lines) >= 4, lines  # users create, cluster status, dags list, --help
    for argv in lines:
        parses(argv)
    assert any(argv[:2] == ["users", "create"] for argv in lines)
    assert any(argv[:2] == ["cluster", "status"] for argv in lines)


def test_every_service_command_parses(services: dict[str, dict[str, Any]]) -> None:
    names = raftsched_services(services)
    assert names >= {"migrate", *named(services, "scheduler"), *named(services, "worker")}
    for name in sorted(names):
        parses(command(services[name]))


def test_the_admin_container_has_a_token_and_the_cluster(
    services: dict[str, dict[str, Any]],
) -> None:
    """`docker compose run --rm migrate users create ...` calls the cluster over gRPC: it needs
    the nodes (their gRPC addresses follow from [cluster] nodes) and an admin token."""
    values = env(services["migrate"])
    admin = env(services[named(services, "scheduler")[0]])["RAFTSCHED__API__ADMIN_TOKENS"]
    assert values["RAFTSCHED_TOKEN"] == admin
    assert values["RAFTSCHED__CLUSTER__NODES"]


def test_the_parser_check_catches_what_broke_before() -> None:
    """The header's old lines: a flag users create never had, and (before global flags
    were accepted on either side) --server before the subcommand."""
    with pytest.raises(AssertionError):
        parses(["users", "create", "--username", "admin", "--role", "admin"])
    with pytest.raises(AssertionError):
        parses(["--server", "h:7301", "db", "migrate"])  # db migrate takes no --server
    parses(["--server", "h:7301", "--token", "t", "cluster", "status"])


def test_the_readme_compose_commands_parse(services: dict[str, dict[str, Any]]) -> None:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Deploying with Docker Compose\n")
    section = text[start : text.index("\n## ", start + 1)]
    commented = "\n".join(f"#  {line}" for line in section.splitlines() if line.startswith("    "))
    lines = commented_command_lines(commented, raftsched_services(services))
    assert any(argv[:2] == ["users", "create"] for argv in lines), lines
    assert any(argv[:2] == ["cluster", "status"] for argv in lines), lines
    for argv in lines:
        parses(argv)


# -- Prometheus ------------------------------------------------------------------------------

ADMIN_OFFSET = 100
WORKER_METRICS_PORT = 7401  # [worker] metrics_port's default


def test_prometheus_scrapes_every_scheduler_node_status_endpoint(
    services: dict[str, dict[str, Any]],
) -> None:
    prometheus = services["prometheus"]
    assert prometheus.get("restart") in LONG_RUNNING
    assert "/-/healthy" in healthcheck_text(prometheus)
    mount = next(
        str(v)
        for v in prometheus["volumes"]
        if str(v).endswith(":/etc/prometheus/prometheus.yml:ro")
    )
    assert "--config.file=/etc/prometheus/prometheus.yml" in command(prometheus)
    assert set(prometheus["depends_on"]) == set(named(services, "scheduler"))
    assert all(str(p).startswith("127.0.0.1:") for p in prometheus.get("ports", []))

    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    jobs = config["scrape_configs"]
    targets = {
        job["job_name"]: sorted(
            target for static in job.get("static_configs", []) for target in static["targets"]
        )
        for job in jobs
        if job.get("metrics_path", "/metrics") == "/metrics"
    }
    expected = [f"{name}:{RAFT_PORT + ADMIN_OFFSET}" for name in named(services, "scheduler")]
    assert targets["raftsched-scheduler"] == expected, "the scheduler services' /metrics"
    workers = named(services, "worker")
    assert targets["raftsched-worker"] == [f"{name}:{WORKER_METRICS_PORT}" for name in workers]
    for name in workers:  # reachable from Prometheus's container, published nowhere
        assert env(services[name])["RAFTSCHED__WORKER__METRICS_HOST"] == "0.0.0.0", name
        assert not services[name].get("ports"), name
    for name in named(services, "scheduler"):
        # the admin endpoint listens on the node's own container address, not loopback
        assert "RAFTSCHED__CLUSTER__ADMIN_BIND" not in env(services[name]), name
