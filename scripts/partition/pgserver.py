"""A private, throw-away PostgreSQL server: for partition runs and for DB-outage tests.

The machine's shared server must never be stopped or reconfigured, so whoever needs to restart
a database starts its own: ``initdb`` + ``pg_ctl`` from ``/usr/lib/postgresql/<v>/bin``, run
as the ``postgres`` user (PostgreSQL refuses to run as root: ``runuser -u postgres --``), in a
temporary directory owned by that user, with its unix socket inside it, on its own port.

- ``listen`` is where clients reach it (always 127.0.0.1 too); ``trusted_subnet`` lets hosts
  of that subnet in (a partition run's namespaces reach it on the bridge address).
- ``durable=True`` (partition runs) keeps fsync and synchronous_commit on: a restart must not
  lose a committed write, or the checker would blame the scheduler for it. ``durable=False``
  (tests) switches them off, which makes initdb and restarts fast.

    with PostgresServer(durable=False) as pg:
        url = pg.create_database("t1")
        pg.stop()   # fast shutdown: clients are disconnected
        pg.start()

Leaving the block (or ``cleanup``) stops the server, in immediate mode if need be, and removes
its directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PG_USER = "postgres"
DATABASE = "raftsched"
LOOPBACK = "127.0.0.1"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory that has initdb and pg_ctl."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def unavailable_reason() -> str | None:
    """None if a private server can run here, else why it cannot."""
    if pg_bin() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER!r} system user to run PostgreSQL as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != PG_USER:
        return f"need root (to run PostgreSQL as {PG_USER!r}) or to be {PG_USER!r}"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed in this environment"
    return None


def _free_port(host: str) -> int:
    # Below the kernel's ephemeral range, so outgoing connections do not take it meanwhile.
    for _ in range(500):
        port = random.randrange(20000, 30000)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host}")


class PostgresServer:
    def __init__(
        self,
        listen: str = LOOPBACK,
        trusted_subnet: str | None = None,
        *,
        durable: bool = True,
        port: int | None = None,
    ) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self.bin = pg_bin()
        assert self.bin is not None
        self.listen = listen
        self.durable = durable
        self.port = port or _free_port(listen)
        self.root = Path(tempfile.mkdtemp(prefix="raftsched-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.running = False
        user = pwd.getpwnam(PG_USER)
        self.socket_dir.mkdir()
        for path in (self.root, self.socket_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
        self._as_postgres(
            str(self.bin / "initdb"),
            *("-D", str(self.data), "-U", PG_USER, "-A", "trust", "-E", "UTF8"),
            *(() if durable else ("--no-sync",)),
            "--no-instructions",
        )
        if trusted_subnet:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {trusted_subnet} trust\n")

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _as_postgres(self, *argv: str, timeout: float = 120) -> None:
        prefix = ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []
        done = subprocess.run(
            [*prefix, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n"
                f"{self.log_tail()}"
            )

    def start(self) -> None:
        addresses = LOOPBACK if self.listen == LOOPBACK else f"{LOOPBACK},{self.listen}"
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses={addresses}"
            " -c max_connections=200"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            *("-D", str(self.data), "-l", str(self.log), "-o", options),
            *("-w", "-t", "60", "start"),
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``fast`` disconnects clients and shuts down cleanly; ``immediate`` is a crash."""
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"
        )
        self.running = False

    def cleanup(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():  # our server, which we lost track of: its own PID file
            with contextlib.suppress(Exception):
                os.kill(int(pid_file.read_text().split()[0]), 9)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- use ---------------------------------------------------------------------------------

    def create_database(self, name: str = DATABASE) -> str:
        import psycopg

        with psycopg.connect(
            f"host={self.listen} port={self.port} user={PG_USER} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://{PG_USER}@{self.listen}:{self.port}/{database}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
