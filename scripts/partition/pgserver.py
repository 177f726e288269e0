"""A per-run PostgreSQL server that nodes inside the namespaces can reach.

The machine's server listens on 127.0.0.1 only and must never be touched, so each partition
run starts its own: ``initdb`` + ``pg_ctl`` from ``/usr/lib/postgresql/<v>/bin``, run as the
``postgres`` user (``runuser -u postgres --``), in a temporary directory, listening on the
bridge address (and 127.0.0.1) on its own port, trusting only the run's /24. Durable settings
(fsync and synchronous_commit stay on): a restart must not lose a committed write, or the
checker would blame the scheduler for it. ``stop`` is a fast shutdown; ``start`` again.
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


def pg_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def unavailable_reason() -> str | None:
    if pg_bin() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER!r} system user to run PostgreSQL as"
    if os.geteuid() != 0:
        return "need root to run PostgreSQL as the postgres user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed in this environment"
    return None


def _free_port(host: str) -> int:
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
    def __init__(self, listen: str, trusted_subnet: str) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self.bin = pg_bin()
        assert self.bin is not None
        self.listen = listen
        self.port = _free_port(listen)
        self.root = Path(tempfile.mkdtemp(prefix="raftsched-partition-pg-"))
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
            "--no-instructions",
        )
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {trusted_subnet} trust\n")

    def _as_postgres(self, *argv: str, timeout: float = 120) -> None:
        done = subprocess.run(
            ["runuser", "-u", PG_USER, "--", *argv],
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
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1,{self.listen}"
            " -c max_connections=200"
        )
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            *("-D", str(self.data), "-l", str(self.log), "-o", options),
            *("-w", "-t", "60", "start"),
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"
        )
        self.running = False

    def create_database(self, name: str = DATABASE) -> str:
        import psycopg

        with psycopg.connect(
            f"host={self.listen} port={self.port} user={PG_USER} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://{PG_USER}@{self.listen}:{self.port}/{database}"

    def cleanup(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():  # our server, which we lost track of: its own PID file
            with contextlib.suppress(Exception):
                os.kill(int(pid_file.read_text().split()[0]), 9)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
