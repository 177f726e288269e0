"""A private, throw-away PostgreSQL server that a test may stop and start at will.

The machine's shared server on 127.0.0.1:5432 must never be stopped, so the DB-outage test
runs its own: ``initdb`` + ``pg_ctl`` from ``/usr/lib/postgresql/<v>/bin``, run as the
``postgres`` user (PostgreSQL refuses to run as root), in a temporary directory owned by that
user, on a free loopback port, with its unix socket inside that directory. Durability is
switched off (``fsync=off``): it is a test fixture, and it makes initdb and restarts fast.

    with PrivatePostgres() as pg:
        url = pg.create_database("t1")
        pg.stop()   # fast shutdown: clients are disconnected
        pg.start()

Leaving the block stops the server (immediate mode if needed) and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

PG_BIN_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
PG_USER = "postgres"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory that has initdb and pg_ctl."""
    for candidate in PG_BIN_CANDIDATES:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def available() -> str | None:
    """None if a private server can be run here, else the reason it cannot."""
    if pg_bin() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER!r} system user to run PostgreSQL as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != PG_USER:
        return f"need root (to run as {PG_USER!r}) or to be {PG_USER!r}"
    return None


class PrivatePostgres:
    def __init__(self, port: int | None = None) -> None:
        reason = available()
        if reason is not None:
            raise RuntimeError(reason)
        self.bin = pg_bin()
        assert self.bin is not None
        if port is None:
            from harness import free_ports

            port = free_ports(1, offsets=(0,))[0]
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="raftsched-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.running = False
        user = pwd.getpwnam(PG_USER)
        self.socket_dir.mkdir()
        for path in (self.root, self.socket_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
        self._initdb()

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> PrivatePostgres:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _as_postgres(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        prefix = [] if os.geteuid() != 0 else ["runuser", "-u", PG_USER, "--"]
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
        return done

    def _initdb(self) -> None:
        self._as_postgres(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            PG_USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=100"
        )
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
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
        if pid_file.exists():  # a server we lost track of: stop it by its own PID file
            with contextlib.suppress(Exception):
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, 9)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- use ----------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={PG_USER} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
