"""Task code cannot read the worker's token or another DAG's secrets (issue #22, items 1 and
10): a real scheduler node, a real worker, and a PythonTask that tries every route.

DAG ``holder`` runs a BashTask and then a PythonTask that declare the variable ``A_SECRET``; the
second one waits while DAG ``walker``'s task walks every ``/proc/PID`` of every process of
this cluster (the node, the worker, its task supervisor, fork servers and guards, the holder's
task, itself): ``cmdline``, ``environ``, every ``fd/*``, ``mem`` (each region ``maps`` lists),
and every file under the cluster's folder (config, DAGs, logs, DB, Raft data) and the
worker's HOME. It looks for the worker's token and ``A_SECRET`` in all it could read, without
holding either (it knows their SHA-256 and prefix only), and reports each route it tried, so
the test cannot pass by trying nothing.

- ``test_a_task_of_the_workers_user_reads_no_token_and_no_secret``: no ``run_as_user``, the
  task runs as the worker's user (as root, the worker is started as nobody: root reads every
  process). The supervisor's fds (the death report's memfd holds the token), its memory and
  the other processes' are closed to it: they are non-dumpable.
- ``test_a_task_run_as_another_user_reads_no_token_and_no_secret``: ``[worker] run_as_user
  = nobody`` (needs root: skipped otherwise, except in CI): nothing of raftsched is readable,
  the files it can read hold neither, and the task runs as nobody with its own HOME.
- ``test_no_attempt_leaves_its_secrets_in_memory_that_later_attempts_copy``: the supervisor
  no longer reads a spawn's spec, so an attempt's secrets are not left in its memory (root
  reads it) nor in the memory a later DAG's warm task copies from its fork server.
- ``test_the_supervisor_and_every_fork_of_it_are_non_dumpable``: the same-user fix as root can
  see it (a warm task inherits the supervisor's flag); a cold PythonTask protects itself.
- ``test_the_worker_reads_what_a_task_run_as_another_user_left_without_trusting_it``: a result
  file turned into a link to a root-only file, or a FIFO, fails the attempt (root only).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shlex
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_harness import ApiCluster
from cryptography.fernet import Fernet
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2
from raftsched.core.versions import RELEASE
from raftsched.store import queries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux"),
    pytest.mark.timeout(240),
]

TOKEN = f"RSTOK{secrets.token_hex(16)}"  # the worker's token
A_SECRET = f"RSSEC{secrets.token_hex(16)}"  # DAG holder's declared variable
IS_ROOT = os.geteuid() == 0
NOBODY = 65534
ROOT = Path(__file__).resolve().parents[2]

HOLDER_DAG = """\
import os
import time
from pathlib import Path

from raftsched import DAG, BashTask, PythonTask

SYNC = Path({sync!r})


def hold():
    assert os.environ["RAFTSCHED_VAR_A_SECRET"]
    (SYNC / "holder.pid").write_text(str(os.getpid()))
    for _ in range(1200):  # until the test says stop, at most 120 s
        if (SYNC / "stop").exists():
            return
        time.sleep(0.1)


with DAG("holder", schedule=None):
    first = BashTask("first", command='test -n "$RAFTSCHED_VAR_A_SECRET"', secrets=["A_SECRET"])
    held = PythonTask("hold", fn=hold, secrets=["A_SECRET"])
    first >> held
"""

# The walker: everything it may try, as an attacker would (it even makes itself dumpable to
# read its own memory, a copy of its fork server's).
WALKER_DAG = """\
import ctypes
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path

from raftsched import DAG, BashTask, PythonTask

PATTERN = re.compile(rb"RS(?:TOK|SEC)[0-9a-f]{{32}}")
TARGETS = {targets!r}
MARK = {mark!r}
SYNC = Path({sync!r})
FOLDERS = {folders!r}
READ_CAP = 1 << 20
MEM_CAP = 512 << 20
MAX_FILES = 5000


def _stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


class Walk:
    def __init__(self):
        self.found = []
        self.tried = 0
        self.readable = 0
        self.pids = {{}}

    def scan(self, data, where):
        for m in PATTERN.finditer(data):
            name = TARGETS.get(hashlib.sha256(m.group()).hexdigest())
            if name:
                self.found.append([name, where])

    def route(self, pid, name, fn):
        self.tried += 1
        try:
            result = fn()
        except OSError as err:
            self.pids[pid]["routes"][name] = "denied: %s" % (err.strerror or err)
            return
        self.readable += 1
        self.pids[pid]["routes"][name] = result

    def read_file(self, path, where):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "opened (not a file)"
            data = os.pread(fd, READ_CAP, 0)
        finally:
            os.close(fd)
        self.scan(data, where)
        return "read %d bytes" % len(data)

    def fds(self, pid):
        names = os.listdir("/proc/%d/fd" % pid)
        opened = 0
        for n in names:
            self.tried += 1
            try:
                self.read_file("/proc/%d/fd/%s" % (pid, n), "pid %d fd %s" % (pid, n))
            except OSError:
                continue
            self.readable += 1
            opened += 1
        return "listed %d, opened %d" % (len(names), opened)

    def memory(self, pid):
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
        fd = os.open("/proc/%d/mem" % pid, os.O_RDONLY)
        total = 0
        try:
            for line in maps.splitlines():
                parts = line.split()
                perms, path = parts[1], (parts[5] if len(parts) > 5 else "")
                if "r" not in perms or path in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                    continue
                if path.startswith("/") and "w" not in perms:
                    continue  # a file's read-only mapping holds nothing of the run
                start, end = (int(x, 16) for x in parts[0].split("-"))
                offset, tail = start, b""
                while offset < end and total < MEM_CAP:
                    try:
                        chunk = os.pread(fd, min(4 << 20, end - offset), offset)
                    except OSError:
                        break
                    if not chunk:
                        break
                    self.scan(tail + chunk, "pid %d mem" % pid)
                    tail = chunk[-40:]
                    offset += len(chunk)
                    total += len(chunk)
        finally:
            os.close(fd)
        return "read %d bytes" % total

    def process(self, pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read()
        except OSError:
            return
        self.pids[pid] = {{"cmd": cmd.replace(b"\\0", b" ").decode(errors="replace")[:200]}}
        self.pids[pid]["routes"] = {{}}
        for name in ("cmdline", "environ"):
            path, where = "/proc/%d/%s" % (pid, name), "pid %d %s" % (pid, name)
            self.route(pid, name, lambda: self.read_file(path, where))
        self.route(pid, "fd", lambda: self.fds(pid))
        self.route(pid, "mem", lambda: self.memory(pid))

    def files(self):
        tried = read = 0
        for folder in FOLDERS:
            tried += 1
            try:
                os.listdir(folder)
            except OSError:
                continue
            for root, dirs, names in os.walk(folder):
                for name in names:
                    if tried >= MAX_FILES:
                        return tried, read
                    tried += 1
                    try:
                        self.read_file(os.path.join(root, name), "file " + os.path.join(root, name))
                    except OSError:
                        continue
                    read += 1
        return tried, read


def raftsched_pids():
    parents, found = {{}}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            parents[pid] = int(_stat_fields(pid)[1])
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if MARK.encode() in f.read():
                    found.add(pid)
        except (OSError, IndexError, ValueError):
            continue
    while True:  # and every descendant of those
        more = {{p for p, parent in parents.items() if parent in found}} - found
        if not more:
            return sorted(found)
        found |= more


# Every attempt's on-demand socket (worker/secret_channel.py) asked for A_SECRET, and this
# attempt's own through get_variable: holder's is not this session's, and A_SECRET is
# restricted to DAG holder. The answers, never a value.
def channels():
    import socket

    from raftsched.secrets import get_variable

    out = []
    tmp = os.environ.get("TMPDIR") or "/tmp"
    found = {{
        os.path.join(folder, name, "s")
        for folder in {{"/tmp", tmp}}
        for name in (os.listdir(folder) if os.path.isdir(folder) else ())
        if name.startswith("raftsched-secrets-")
    }}
    for path in sorted(found)[:50]:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(20)
                s.connect(path)
                s.sendall(b'{{"kind": "variable", "name": "A_SECRET"}}\\n')
                answer = json.loads(s.makefile().readline())
            out.append([path, answer.get("code", "VALUE"), answer.get("error", "")[:200]])
        except (OSError, ValueError) as err:
            out.append([path, "denied", str(err)[:200]])
    try:
        get_variable("A_SECRET")
        out.append(["own", "VALUE", ""])
    except Exception as err:
        out.append(["own", type(err).__name__, str(err)[:200]])
    return out


def walk():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_DUMPABLE 1: my own memory too
    holder = None
    for _ in range(300):
        if (SYNC / "holder.pid").exists():
            holder = int((SYNC / "holder.pid").read_text())
            break
        time.sleep(0.1)
    asked = channels()  # first: nothing it could get is in memory the walk reads later
    w = Walk()
    pids = raftsched_pids()
    for pid in pids:
        if pid != os.getpid():
            w.process(pid)
    w.process(os.getpid())  # last: what I read of the others is in my memory then
    files_tried, files_read = w.files()
    with open("/proc/self/status") as f:
        cap_eff = [line.split()[1] for line in f if line.startswith("CapEff:")][0]
    report = {{
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
        "cap_eff": cap_eff, "home": os.environ.get("HOME"), "cwd": os.getcwd(),
        "self": os.getpid(), "holder": holder, "pids": w.pids, "tried": w.tried,
        "readable": w.readable, "files_tried": files_tried, "files_read": files_read,
        "found": w.found, "channels": asked,
    }}
    print("WALK " + json.dumps(report))


# The same routes from bash (a task exec'd as the user, where the Python walker is a fork):
# every /proc/PID but its own attempt's (cmdline, environ, every fd/*), every file it can
# reach; what it reads is searched for the prefix, each match's SHA-256 for a target's.
WALK_SH = r'''
set -u
mine=$(cut -d' ' -f6 /proc/$$/stat)
tried=0; readable=0; : > matches
probe() {{
    tried=$((tried + 1))
    if timeout 2 head -c 1048576 "$1" > chunk 2>/dev/null; then
        readable=$((readable + 1))
        grep -a -o -E 'RS(TOK|SEC)[0-9a-f]{{32}}' chunk >> matches
    fi
}}
for d in /proc/[0-9]*; do
    [ "$SECONDS" -lt 60 ] || break  # bounded; a root walker would read every process
    s=$(cut -d' ' -f6 "$d/stat" 2>/dev/null) || continue
    [ "$s" = "$mine" ] && continue  # this attempt's own processes
    probe "$d/cmdline"
    probe "$d/environ"
    for f in "$d"/fd/*; do
        tried=$((tried + 1))
        target=$(readlink "$f" 2>/dev/null) || continue
        case $target in  # what holds no file to read (and may block a reader)
            pipe:*|socket:*|anon_inode:*|/dev/*) readable=$((readable + 1)); continue ;;
        esac
        tried=$((tried - 1))
        probe "$f"
    done
done
files=0
while IFS= read -r f; do files=$((files + 1)); probe "$f"; done < <(
    find {sh_folders} -type f 2>/dev/null | head -n 5000)
for h in {hashes}; do echo "$h"; done > targets
found=$(sort -u matches | while read -r m; do printf %s "$m" | sha256sum | cut -c1-64; done |
    grep -c -x -F -f targets)
printf 'BASH {{"uid": %s, "home": "%s", "tried": %s, "readable": %s, "files": %s,' \
    "$(id -u)" "$HOME" "$tried" "$readable" "$files"
echo ' "found": '"$found"'}}'
'''

with DAG("walker", schedule=None):
    walk_sh = BashTask("walk_sh", command=WALK_SH)
    walk_sh >> PythonTask("walk", fn=walk)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    """The cluster's folder where another user may enter (not the test's private tmp_path):
    then only the files' own modes keep its secrets from a task run as that user."""
    path = Path(tempfile.mkdtemp(prefix="raftsched-proc-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _walk(
    workdir: Path, *, run_as_user: str, worker: dict[str, Any] | None = None
) -> tuple[dict[str, Any], ApiCluster]:
    """Run the holder and the walker on a real node and worker; the walker's report."""
    sync = workdir / "sync"
    sync.mkdir()
    sync.chmod(0o1777)  # the tasks, whoever they run as, leave their marks here
    cluster_dir = workdir / "cluster"
    targets = {_sha(TOKEN): "the worker's token", _sha(A_SECRET): "DAG holder's A_SECRET"}
    # files: the worker's own user reads its config by design (taskenv.py says so)
    folders = [str(workdir), os.path.expanduser("~")] if run_as_user else []
    dags = {
        "holder_dag.py": HOLDER_DAG.format(sync=str(sync)),
        "walker_dag.py": WALKER_DAG.format(
            hashes=" ".join(targets),
            sh_folders=" ".join(map(shlex.quote, folders)) or "/nonexistent",
            targets=targets,
            mark=str(cluster_dir),
            sync=str(sync),
            folders=folders,
        ),
    }
    config: dict[str, dict[str, Any]] = {
        "api": {"worker_tokens": TOKEN},
        "secrets": {"fernet_key": Fernet.generate_key().decode()},
        "worker": {"run_as_user": run_as_user},
    }
    db_url = f"sqlite:///{cluster_dir / 'metadata' / 'raftsched.db'}"
    cluster = ApiCluster(cluster_dir, db_url, nodes=1, dags=dags, config=config, lease_ttl=10)
    cluster.config_path.chmod(0o600)  # tokens and the Fernet key: the worker's alone
    if worker and "uid" in worker:  # a worker of another user reads its config
        os.chown(cluster.config_path, worker["uid"], -1)
    with cluster:
        cluster.start()
        leads = lambda: (cluster.status(0) or {}).get("role") == "leader"  # noqa: E731
        wait_for(leads, timeout=60, what="a leader")
        client = cluster.client()
        cluster.wait_dags(client, {"holder", "walker"})
        wait_for(  # a restriction is new in release 3
            lambda: (cluster.status(0) or {}).get("cluster_version") == RELEASE,
            timeout=30,
            what="the cluster version of this release",
        )
        # Any DAG may read an unrestricted variable on demand, as in Airflow: "another DAG's
        # secret" is one restricted to its DAG (docs/architecture.md §22)
        client.secrets.SetSecret(
            secret_pb2.SetSecretRequest(
                kind="variable", key="A_SECRET", value=A_SECRET, dags=["holder"]
            )
        )
        options = {k: v for k, v in (worker or {}).items() if k != "uid"}
        cluster.start_worker("w1", concurrency=3, token_in_env=True, token=TOKEN, **options)
        held = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="holder")).run.run_id
        wait_for(lambda: (sync / "holder.pid").exists(), timeout=90, what="the holder's task")
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="walker")).run.run_id
        run = cluster.wait_run(client, "walker", run_id, timeout=120)
        (sync / "stop").touch()
        assert cluster.wait_run(client, "holder", held).state == common_pb2.RUN_STATE_SUCCESS

        def logged(task: str, mark: str) -> dict[str, Any]:
            def done() -> str | None:  # the DB has the log once the outbox drained into it
                chunks = queries.read_log(cluster.engine, "walker", run_id, task, 1)
                text = "".join(c.text for c in chunks)
                return text if mark in text or run.state != common_pb2.RUN_STATE_SUCCESS else None

            log = wait_for(done, timeout=60, what=f"the log of {task} in the DB")
            assert run.state == common_pb2.RUN_STATE_SUCCESS, log[-3000:]
            lines = [line for line in log.splitlines() if line.startswith(mark)]
            assert lines, log[-3000:]
            return json.loads(lines[-1][len(mark) :])  # type: ignore[no-any-return]

        report = logged("walk", "WALK ")
        report["bash"] = logged("walk_sh", "BASH ")
        report["worker_pid"] = cluster.workers["w1"].pid
        report["node_pids"] = [n.pid for n in cluster.nodes]
    return report, cluster


def _check(report: dict[str, Any]) -> None:
    """Nothing found, by routes that were really tried, on every process that matters."""
    pids = {int(p): v for p, v in report["pids"].items()}
    me = report["self"]
    bash = report["bash"]  # the bash walker: every /proc/PID but its own attempt's
    assert bash["found"] == 0 and bash["tried"] >= 3 * len(pids) and bash["readable"], bash
    found_in = [w.split() for _, w in report["found"]]
    where = {int(w[1]): pids.get(int(w[1]), {}).get("cmd") for w in found_in if w[0] == "pid"}
    assert report["found"] == [], (report["found"], where)
    assert report["worker_pid"] in pids and set(report["node_pids"]) <= set(pids), pids.keys()
    assert report["holder"] in pids, "the holder's task was not walked"
    supervisors = [p for p, v in pids.items() if "raftsched.worker.supervisor" in v["cmd"]]
    assert len(supervisors) >= 3, pids  # the supervisor, its fork servers, the guards
    assert report["tried"] >= 4 * len(pids) >= 4 * 7
    # the on-demand sockets: the holder's refuses another session, its own the restriction
    asked = {path: (code, error) for path, code, error in report["channels"]}
    assert asked.pop("own")[1].startswith("variable A_SECRET is restricted to DAGs holder"), asked
    assert len(asked) >= 2, asked  # the holder's and its own socket at least
    assert all(code in ("refused", "restricted", "denied") for code, _ in asked.values()), asked
    assert any("not in this attempt's session" in error for _, error in asked.values()), asked
    for pid, seen in pids.items():
        routes = seen["routes"]
        assert routes["cmdline"].startswith("read"), (pid, routes)
        if pid == me:
            assert routes["mem"].startswith("read") and routes["environ"].startswith("read")
            assert int(routes["mem"].split()[1]) > 1 << 20  # it did read a memory: its own
            continue
        for route in ("environ", "fd", "mem"):  # no fd, environment or memory of any other
            closed = routes[route].startswith("denied") or (
                route == "fd"
                and routes[route].endswith(" opened 0")  # listed (root's), opened none
            )
            assert closed, (pid, seen["cmd"], route, routes[route])


@pytest.mark.skipif(not (IS_ROOT or os.environ.get("CI") == "true"), reason="needs root")
def test_a_task_run_as_another_user_reads_no_token_and_no_secret(workdir: Path) -> None:
    report, cluster = _walk(workdir, run_as_user="nobody")
    _check(report)
    assert (report["uid"], report["euid"]) == (NOBODY, NOBODY), report
    assert report["cap_eff"] == "0000000000000000", report
    assert report["home"] == report["cwd"] and "raftsched-attempt-" in report["home"]
    bash = report["bash"]
    assert bash["uid"] == NOBODY and "raftsched-attempt-" in bash["home"], bash
    assert bash["files"] > 0, bash
    # it read files of the cluster's folder (DAG files, logs...), but not the config
    assert report["files_read"] > 0 and report["files_tried"] > report["files_read"]
    assert TOKEN.encode() in cluster.config_path.read_bytes()  # a file worth trying (0600)


def _as_nobody() -> dict[str, Any]:
    """How to start the worker as nobody: setpriv, and a Python interpreter nobody may run
    (ours, or the system's of the same version with our packages on PYTHONPATH)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to start the worker as nobody")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = [shutil.which(version, path=p) for p in ("/usr/local/bin", "/usr/bin")]
    for python in [sys.executable, *filter(None, system)]:
        if _runnable_by_others(python):
            break
    else:
        pytest.skip(f"no {version} that nobody may run (ours is {sys.executable})")
    paths = sysconfig.get_paths()
    pythonpath = os.pathsep.join(dict.fromkeys([str(ROOT), paths["purelib"], paths["platlib"]]))
    return {
        "uid": NOBODY,
        "wrapper": ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"],
        "python": python,
        "extra_env": {"PYTHONPATH": pythonpath, "HOME": "/"},
    }


def _runnable_by_others(path: str) -> bool:
    real = os.path.realpath(path)
    folders = [str(p) for p in Path(real).parents]
    try:
        return all(os.stat(f).st_mode & 0o001 for f in folders) and bool(
            os.stat(real).st_mode & 0o005 == 0o005
        )
    except OSError:
        return False


def test_a_task_of_the_workers_user_reads_no_token_and_no_secret(workdir: Path) -> None:
    # As root the worker runs as nobody (root reads every process's /proc files): the task,
    # of the worker's user, is then an unprivileged process of the same user, as for a
    # worker that is not root.
    worker = _as_nobody() if IS_ROOT else None
    report, _ = _walk(workdir, run_as_user="", worker=worker)
    _check(report)
    assert report["uid"] == report["bash"]["uid"] == (NOBODY if IS_ROOT else os.getuid())
    assert report["cap_eff"] == "0000000000000000", report


SCAN_DAG = """\
import ctypes
import hashlib
import json
import os
import re

PATTERN = re.compile(rb"RSSEC[0-9a-f]{{32}}")
TARGET = {target!r}


def scan():
    ctypes.CDLL(None).prctl(4, ctypes.c_ulong(1), 0, 0, 0)  # dumpable: my own memory
    hits = total = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    for line in maps:
        parts = line.split()
        path = parts[5] if len(parts) > 5 else ""
        file_text = path[:1] == "/" and "w" not in parts[1]
        if "r" not in parts[1] or path.startswith("[v") or file_text:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        try:
            data = os.pread(fd, end - start, start)
        except OSError:
            continue
        total += len(data)
        hits += sum(hashlib.sha256(m.group()).hexdigest() == TARGET for m in PATTERN.finditer(data))
    print("SCAN " + json.dumps({{"hits": hits, "bytes": total}}))
"""


def _memory_hits(pid: int, secret: bytes) -> int:
    """How often ``secret`` is in the memory of process ``pid`` (root reads any)."""
    hits = 0
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read().splitlines()
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        for line in maps:
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and parts[5].startswith("[v")):
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            with contextlib.suppress(OSError):
                hits += os.pread(fd, end - start, start).count(secret)
    finally:
        os.close(fd)
    return hits


def test_no_attempt_leaves_its_secrets_in_memory_that_later_attempts_copy(tmp_path: Path) -> None:
    """Item 10's root: the supervisor read each spawn's spec (the task's environment, its
    declared secrets), so what it freed stayed in its memory, and in that of every fork it
    made after: fork servers, and through them the warm tasks of other DAGs."""
    from raftsched.core.model import TaskKey
    from raftsched.worker import executor
    from raftsched.worker.logs import LogBuffer
    from raftsched.worker.runner import Attempt
    from raftsched.worker.transport import Assignment

    secret = f"RSSEC{secrets.token_hex(16)}"
    key = TaskKey("a", "manual__1", "t")
    for _ in range(3):  # DAG a's bash attempts, with its secret in their environment
        a = Assignment(
            key=key, token=1, try_number=1, kind="bash", command="true", env=(("A_SECRET", secret),)
        )
        assert Attempt(a, LogBuffer().write).run().success
    dag = tmp_path / "scan_dag.py"  # a new DAG file: its fork server is forked now
    dag.write_text(SCAN_DAG.format(target=_sha(secret)))
    buffer = LogBuffer()
    b = Assignment(
        key=TaskKey("b", "manual__1", "scan"),
        token=1,
        try_number=1,
        kind="python",
        fileloc=str(dag),
        callable_name="scan",
    )
    outcome = Attempt(b, buffer.write).run()
    out = "".join(t for s, t in buffer.take(max_chunks=10_000))
    assert outcome.success, out
    seen = json.loads(out.split("SCAN ", 1)[1])
    assert seen["bytes"] > 1 << 20, seen  # it read its memory (a fork server's copy)
    assert seen["hits"] == 0, "DAG b's task found DAG a's secret in its own memory"
    if IS_ROOT:  # and the supervisor's own memory holds none of it either
        supervisor = executor.executor().proc
        assert supervisor is not None
        assert _memory_hits(supervisor.pid, secret.encode()) == 0


RESULT_DAG = """\
import os

STOLEN = {stolen!r}


def give():
    return {{"uid": os.getuid(), "home_is_cwd": os.environ["HOME"] == os.getcwd()}}


def link():  # its result file: a link to a file only the worker may read
    os.symlink(STOLEN, os.environ["RAFTSCHED_RESULT_FILE"])
    os._exit(0)  # before raftsched writes its return value there


def fifo():  # its result file: a FIFO that would block a reader forever
    os.mkfifo(os.environ["RAFTSCHED_RESULT_FILE"])
    os._exit(0)
"""


@pytest.fixture
def as_nobody() -> Iterator[None]:
    from raftsched.worker import task_user

    task_user.configure(task_user.resolve("nobody"))
    try:
        yield
    finally:
        task_user.configure(None)


@pytest.mark.skipif(not (IS_ROOT or os.environ.get("CI") == "true"), reason="needs root")
def test_the_worker_reads_what_a_task_run_as_another_user_left_without_trusting_it(
    tmp_path: Path, as_nobody: None
) -> None:
    from raftsched.core.model import TaskKey
    from raftsched.worker.logs import LogBuffer
    from raftsched.worker.runner import Attempt
    from raftsched.worker.transport import Assignment

    stolen = tmp_path / "root-only.json"  # tmp_path: the worker's (root's) alone
    stolen.write_text(json.dumps({"return_value_json": json.dumps(f"stolen {A_SECRET}")}))
    stolen.chmod(0o600)
    dag = tmp_path / "result_dag.py"
    dag.write_text(RESULT_DAG.format(stolen=str(stolen)))

    def run(fn: str) -> Any:
        a = Assignment(
            key=TaskKey("r", "manual__1", fn),
            token=1,
            try_number=1,
            kind="python",
            fileloc=str(dag),
            callable_name=fn,
        )
        return Attempt(a, LogBuffer().write).run()

    given = run("give")  # a return value still comes back, from the task's own folder
    assert given.success and json.loads(given.result_json) == {"uid": NOBODY, "home_is_cwd": True}
    linked = run("link")
    assert not linked.success and "not a regular file" in linked.message, linked
    assert A_SECRET not in linked.result_json + linked.message
    piped = run("fifo")  # and the worker does not hang on it
    assert not piped.success and "not a regular file" in piped.message, piped


DUMPABLE_DAG = """\
import ctypes


def dumpable():
    print("DUMPABLE", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
"""


def test_the_supervisor_and_every_fork_of_it_are_non_dumpable(tmp_path: Path) -> None:
    """What root cannot see from outside (it reads any process): a warm task is a fork of a
    fork server, a fork of the supervisor, and inherits its dumpable flag; so is every guard.
    A cold PythonTask, a new program, protects itself before it reads its kwargs."""
    from raftsched.core.model import TaskKey
    from raftsched.worker import executor
    from raftsched.worker.logs import LogBuffer
    from raftsched.worker.runner import Attempt
    from raftsched.worker.supervisor_wire import file_stamp
    from raftsched.worker.transport import Assignment

    dag = tmp_path / "dumpable_dag.py"
    dag.write_text(DUMPABLE_DAG)

    def run() -> str:
        buffer = LogBuffer()
        a = Assignment(
            key=TaskKey("d", "manual__1", "t"),
            token=1,
            try_number=1,
            kind="python",
            fileloc=str(dag),
            callable_name="dumpable",
        )
        outcome = Attempt(a, buffer.write).run()
        out = "".join(t for s, t in buffer.take(max_chunks=10_000))
        assert outcome.success, out
        return out

    assert "DUMPABLE 0" in run()  # warm: the fork server's, hence the supervisor's, flag
    stamp = file_stamp(str(dag))
    assert stamp is not None
    ex = executor.executor()
    with ex.lock:
        ex.cold[str(dag)] = stamp  # as after a failed import: `python -m ..._run_python`
    assert "DUMPABLE 0" in run()
