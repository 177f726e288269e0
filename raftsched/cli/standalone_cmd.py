"""`raftsched standalone`: a whole cluster on this machine, for trying raftsched out.

Three (or five) scheduler nodes as separate processes on loopback, a SQLite database, the
example DAGs, a worker, and the web UI (two webservers behind nginx when nginx is installed,
otherwise one webserver), all under ``$RAFTSCHED_HOME`` (default ``~/raftsched``):

    raftsched.cfg       written on the first run (fresh random cluster secret and web secret
                        key); never rewritten
    admin-password.txt  the web UI's first admin account, made on the first run
    dags/               the example DAGs are copied here when the folder is empty and
                        [core] load_examples is true (the default)
    raftsched.db        the metadata database (SQLite)
    data/               each node's Raft journal
    web/                nginx's config and the webservers' run directory
    logs/               each process's output

The processes run under a :class:`~raftsched.standalone.supervisor.Supervisor`: one that dies is
reported and restarted with backoff; Ctrl-C or SIGTERM stops them all and exits 0.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched.addresses import API_PORT_OFFSET, admin_address_for, api_address_for
from raftsched.errors import ConfigError
from raftsched.standalone.supervisor import ChildSpec, Supervisor

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from raftsched.config import Config
    from raftsched.standalone.webfarm import FarmPlan

DEFAULT_BASE_PORT = 7101
DEFAULT_NODES = 3
WEBSERVERS_BEHIND_NGINX = 2
ADMIN_USER = "admin"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "standalone",
        help="run a complete local cluster (3 scheduler nodes, SQLite, example DAGs)",
        description=(
            "Run a complete raftsched cluster on this machine: scheduler nodes as separate"
            " processes on 127.0.0.1, a SQLite database and the example DAGs, under"
            " $RAFTSCHED_HOME (default ~/raftsched). The first run writes raftsched.cfg there"
            " with a fresh random cluster secret. Ctrl-C stops everything."
        ),
    )
    parser.add_argument(
        "--nodes",
        type=int,
        choices=(3, 5),
        default=None,
        help=f"number of scheduler nodes (default: the config's, else {DEFAULT_NODES})",
    )
    parser.add_argument(
        "--base-port",
        type=_port,
        default=None,
        metavar="PORT",
        help=(
            f"Raft port of the first node; the others follow (default: the config's, else"
            f" {DEFAULT_BASE_PORT}). Each node's status endpoint is its Raft port + 100"
        ),
    )
    parser.add_argument(
        "--web-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="port of the web UI (nginx, or the single webserver without nginx); the"
        " webservers behind nginx take the next ports (default: the port of [webserver] bind)",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="where config, DAGs, database, journals and logs live (default: $RAFTSCHED_HOME,"
        " else ~/raftsched)",
    )
    parser.set_defaults(handler=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    highest = 65535 - 4 - API_PORT_OFFSET
    if not 1024 <= port <= highest:
        raise argparse.ArgumentTypeError(f"{port} is out of range: use 1024..{highest}")
    return port


# -- the layout under home ----------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    home: Path
    config_path: Path
    log_dir: Path

    @classmethod
    def under(cls, home: Path) -> Layout:
        return cls(home=home, config_path=home / "raftsched.cfg", log_dir=home / "logs")


def resolve_home(flag: Path | None, env: dict[str, str] | os._Environ[str]) -> Path:
    raw = flag if flag is not None else Path(env.get("RAFTSCHED_HOME") or "~/raftsched")
    return raw.expanduser().absolute()


def node_addresses(count: int, base_port: int) -> list[str]:
    return [f"127.0.0.1:{base_port + i}" for i in range(count)]


def initial_config(home: Path, addresses: list[str]) -> str:
    """The raftsched.cfg a first run writes. The secret is fresh and random."""
    from cryptography.fernet import Fernet

    return f"""\
# Written by `raftsched standalone` on its first run. Edit freely: it is never overwritten.
# Every key can also be set by the environment variable RAFTSCHED__SECTION__KEY.

[core]
home = {home}
dags_folder = dags
# true: copy the example DAGs into dags/ whenever it is empty (set false to start empty)
load_examples = true

[database]
url = sqlite:///{home / "raftsched.db"}

[cluster]
nodes = {",".join(addresses)}
# The Raft password: encrypts and authenticates traffic between the nodes. Keep it secret.
secret = {secrets.token_urlsafe(32)}
data_dir = data

[scheduler]
scheduler_heartbeat_sec = 5
min_file_process_interval = 30

[webserver]
# Signs the web UI's session cookies; every webserver of this cluster shares it.
secret_key = {secrets.token_urlsafe(32)}

[secrets]
# Encrypts variables and connections at rest (Fernet). Keep it secret; to change it, put a new
# key first and run `raftsched secrets rotate` (README "Variables and connections").
fernet_key = {Fernet.generate_key().decode()}
"""


def prepare_home(layout: Layout, addresses: list[str]) -> list[str]:
    """Create home, raftsched.cfg (first run only) and dags/ (examples copied if empty).
    Returns what was created, for the banner."""
    created: list[str] = []
    layout.home.mkdir(parents=True, exist_ok=True)
    layout.log_dir.mkdir(exist_ok=True)
    if not layout.config_path.exists():
        _write_new(layout.config_path, initial_config(layout.home, addresses))
        created.append(f"wrote {layout.config_path} (with a new random cluster secret)")
    return created


def seed_dags_folder(dags_folder: Path, load_examples: bool) -> int:
    """Create ``dags_folder``; copy the example DAGs into it when it is empty and ``[core]
    load_examples`` is true. Returns how many files were copied."""
    if not load_examples:
        dags_folder.mkdir(parents=True, exist_ok=True)
        return 0
    return copy_examples(dags_folder)


def copy_examples(dags_folder: Path) -> int:
    """Copy the packaged example DAGs into ``dags_folder`` if it has no entries at all."""
    dags_folder.mkdir(parents=True, exist_ok=True)
    if any(dags_folder.iterdir()):
        return 0
    source = Path(__file__).resolve().parent.parent / "example_dags"
    copied = 0
    for path in sorted(source.glob("*.py")) if source.is_dir() else []:
        if path.name == "__init__.py":
            continue
        target = dags_folder / path.name
        if not target.exists():
            shutil.copyfile(path, target)
            copied += 1
    return copied


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` with ``text``, readable by its owner only; never replace a file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def busy_ports(addresses: list[str], admin_addresses: list[str]) -> list[str]:
    busy = []
    for address in [*addresses, *admin_addresses]:
        host, _, port = address.rpartition(":")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host.strip("[]"), int(port)))
            except OSError:
                busy.append(address)
    return busy


# -- the command --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from raftsched.config import load_config
    from raftsched.store.engine import create_engine_for, safe_url
    from raftsched.store.migrate import init_db

    layout = Layout.under(resolve_home(args.home, os.environ))
    if args.config:
        layout = Layout(
            home=layout.home,
            config_path=Path(args.config).expanduser().absolute(),
            log_dir=layout.log_dir,
        )
    requested = node_addresses(args.nodes or DEFAULT_NODES, args.base_port or DEFAULT_BASE_PORT)
    notes = prepare_home(layout, requested)
    child_env = {**os.environ, "RAFTSCHED_HOME": str(layout.home), "PYTHONUNBUFFERED": "1"}
    child_env.pop("RAFTSCHED_CONFIG", None)
    config = load_config(layout.config_path, env=child_env)

    addresses = list(config.cluster.nodes)
    if args.nodes is not None or args.base_port is not None:
        count = args.nodes or len(addresses)
        base = args.base_port or int(addresses[0].rpartition(":")[2])
        wanted = node_addresses(count, base)
        if wanted != addresses:
            notes.append(
                f"{layout.config_path} lists nodes {','.join(addresses)}; using"
                f" {','.join(wanted)} as asked (via RAFTSCHED__CLUSTER__NODES)"
            )
            addresses = wanted
            child_env["RAFTSCHED__CLUSTER__NODES"] = ",".join(addresses)
            config = load_config(layout.config_path, env=child_env)

    copied = seed_dags_folder(config.core.dags_folder, config.core.load_examples)
    if copied:
        notes.append(f"copied {copied} example DAG files into {config.core.dags_folder}")

    admins = [admin_address_for(a, config.cluster.admin_bind) for a in addresses]
    apis = [api_address_for(a, config.api.grpc_bind) for a in addresses]
    web_port = args.web_port or int(config.webserver.bind.rpartition(":")[2])
    web = plan_web(layout, web_port, child_env)
    busy = busy_ports([*addresses, *apis, *web.addresses.values()], admins)
    if busy:
        raise ConfigError(
            f"address(es) already in use: {', '.join(busy)}; is another raftsched running?"
            " Stop it, or pick other ports with --base-port"
        )

    engine = create_engine_for(config.database.url)
    try:
        init_db(engine)
        notes += ensure_admin_user(engine, layout.home / "admin-password.txt")
    finally:
        engine.dispose()

    base_cmd = [sys.executable, "-m", "raftsched", "--config", str(layout.config_path)]
    specs = [
        ChildSpec(
            name=f"scheduler {address}",
            argv=[*base_cmd, "scheduler", "--address", address],
            log_path=layout.log_dir / f"scheduler-{address.rpartition(':')[2]}.log",
            env=child_env,
            cwd=layout.home,
        )
        for address in addresses
    ]
    specs.append(
        ChildSpec(
            name="worker",
            argv=[*base_cmd, "worker"],
            log_path=layout.log_dir / "worker.log",
            env=child_env,
            cwd=layout.home,
        )
    )
    specs += web.specs

    supervisor = Supervisor(specs)
    supervisor.install_signal_handlers()
    supervisor.start()
    if config.core.load_examples and config.secrets.fernet_key:
        from raftsched.standalone.examples import seed_example_connection

        seed_example_connection(apis, f"http://127.0.0.1:{web_port}")
    banner = Banner(layout, config, addresses, admins, specs, supervisor.pids(), notes, web)
    print(banner.render(safe_url(config.database.url)), flush=True)
    code = supervisor.run()
    print("raftsched standalone: stopped", file=sys.stderr, flush=True)
    return code


def plan_web(layout: Layout, port: int, env: dict[str, str]) -> FarmPlan:
    """Two webservers behind nginx when nginx is installed, else one webserver."""
    from raftsched.standalone.webfarm import nginx_available, plan_web_farm

    count = WEBSERVERS_BEHIND_NGINX if nginx_available() else 1
    return plan_web_farm(layout.config_path, count, port, layout.home / "web", env=env)


def ensure_admin_user(engine: Engine, password_file: Path) -> list[str]:
    """On a database without users, create ``admin`` with a random password, kept in a file
    readable by its owner only (as Airflow's standalone does). Returns notes for the banner."""
    from raftsched.store.users import create_user, list_users

    if list_users(engine):
        return []
    password = secrets.token_urlsafe(12)
    create_user(engine, ADMIN_USER, password, "admin")
    password_file.unlink(missing_ok=True)
    _write_new(password_file, password + "\n")
    return [f"created the web UI user {ADMIN_USER!r}; its password is in {password_file}"]


@dataclass(frozen=True)
class Banner:
    """What the user needs to know once everything is started: where things are, how to
    look at the cluster, how to stop it."""

    layout: Layout
    config: Config
    addresses: list[str]
    admins: list[str]
    specs: list[ChildSpec]
    pids: dict[str, int]
    notes: list[str]
    web: FarmPlan

    def render(self, db: str) -> str:
        config, layout = self.config, self.layout
        lines = [*self.notes, ""] if self.notes else []
        lines += [
            "raftsched standalone is running",
            f"  home         {layout.home}",
            f"  config       {layout.config_path}",
            f"  dags folder  {config.core.dags_folder}",
            f"  database     {db}",
            f"  raft data    {config.cluster.data_dir}",
            "",
            "  scheduler nodes:",
        ]
        for address, admin, spec in zip(self.addresses, self.admins, self.specs, strict=False):
            lines.append(
                f"    {address}  pid {self.pids.get(spec.name)}  status http://{admin}/status"
                f"  log {spec.log_path}"
            )
        others = self.specs[len(self.addresses) :]
        if others:
            lines.append("  other processes:")
            lines += [
                f"    {spec.name:<10} pid {self.pids.get(spec.name)}  log {spec.log_path}"
                for spec in others
            ]
        mode = (
            f"nginx in front of {len(self.web.web_addresses)} webservers"
            if self.web.lb_address
            else "one webserver (nginx is not installed, so no load balancer)"
        )
        lines += [
            "",
            f"  web UI:  {self.web.url}  ({mode})",
            f"           user {ADMIN_USER!r}, password in {layout.home / 'admin-password.txt'}",
            f"  status:  raftsched --config {layout.config_path} cluster status",
            "  stop:    press Ctrl-C (or send SIGTERM to this process)",
        ]
        return "\n".join(lines)
