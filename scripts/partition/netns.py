"""Hosts for partition tests: Linux network namespaces on a private bridge.

``Hosts(3)`` makes, for a fresh 6-hex-digit run id R and a free 10.77.K.0/24:

    bridge  rsbr-R      in the root namespace, address 10.77.K.1/24 (the "gateway": the
                        metadata DB and anything else in the root namespace is reached here)
    netns   rs-R-n<i>   lo up; eth0 = one end of the veth pair rsR-h<i> <-> eth0, address
                        10.77.K.<11+i>/24; the host end is enslaved to the bridge

and, inside each namespace, an iptables chain ``RSNEMESIS`` jumped to from INPUT and OUTPUT:
faults append DROP rules to it, ``heal`` flushes it. Rules live in the namespaces, never in
the root namespace, and disappear with them. Only these namespaces, this bridge and its veths
are ever touched.

``start(i, argv)`` runs a process inside namespace i (``ip netns exec``, its own session) and
tracks its PID. ``teardown()`` is idempotent: it kills the tracked processes (and any process
left inside our namespaces: only we start processes there), deletes the namespaces (their
veths and rules go with them) and the bridge. It runs on ``with`` exit, at interpreter exit,
and on SIGINT/SIGTERM when ``handle_signals`` (the default in the main thread).
``cleanup_run(run_id)`` removes what a crashed run left behind.

Needs root (CAP_NET_ADMIN); ``require_root`` says so plainly. iptables is installed with
``apt-get install -y iptables`` if missing (``ensure_iptables``, which prints that it does).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

SUBNET_PREFIX = "10.77"
SUBNET_LOCK = "/tmp/raftsched-netns-subnets.lock"
CHAIN = "RSNEMESIS"
RUN_ID_RE = re.compile(r"^[0-9a-f]{6}$")
STOP_TIMEOUT = 10.0


class NetnsError(RuntimeError):
    """A namespace operation failed; the message has the command and its output."""


# -- environment ----------------------------------------------------------------------------


def require_root() -> None:
    if os.geteuid() != 0:
        raise NetnsError(
            "the partition kit needs root: it creates network namespaces, a bridge and"
            " iptables rules (CAP_NET_ADMIN). Run it as root, e.g. `sudo scripts/partition/run`."
        )


def ensure_iptables(*, install: bool = True) -> str:
    """The iptables binary, installing the Debian package first if it is missing."""
    found = shutil.which("iptables")
    if found:
        return found
    if not install or shutil.which("apt-get") is None:
        raise NetnsError("iptables is not installed: apt-get install -y iptables")
    print("iptables is not installed: running apt-get install -y iptables", file=sys.stderr)
    done = subprocess.run(
        ["apt-get", "install", "-y", "iptables"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    found = shutil.which("iptables")
    if done.returncode != 0 or not found:
        raise NetnsError(f"apt-get install -y iptables failed:\n{done.stdout}\n{done.stderr}")
    return found


def unavailable_reason() -> str | None:
    """None when namespaces can be made here, else why not (for skips and messages)."""
    if os.geteuid() != 0:
        return "not root: network namespaces and iptables need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"rs-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(argv: Sequence[str], *, check: bool = True, timeout: float = 20.0) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _in_use_subnets() -> set[int]:
    used = set()
    text = sh(["ip", "-4", "addr", "show"]) + sh(["ip", "-4", "route", "show"])
    for match in re.finditer(rf"\b{re.escape(SUBNET_PREFIX)}\.(\d+)\.", text):
        used.add(int(match.group(1)))
    return used


# -- hosts ----------------------------------------------------------------------------------


@dataclass
class Host:
    index: int
    namespace: str
    address: str  # IPv4 inside the namespace
    veth: str  # host end, on the bridge
    pids: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"n{self.index}"


class Hosts:
    def __init__(
        self,
        count: int,
        *,
        run_id: str | None = None,
        handle_signals: bool | None = None,
    ) -> None:
        if not 1 <= count <= 200:
            raise ValueError(f"count must be 1..200, got {count}")
        self.run_id = run_id or secrets.token_hex(3)
        if not RUN_ID_RE.match(self.run_id):
            raise ValueError(f"run id must be 6 lowercase hex digits, got {self.run_id!r}")
        self.count = count
        self.bridge = f"rsbr-{self.run_id}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.hosts: list[Host] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.RLock()
        self._torn_down = False
        self._handle_signals = (
            threading.current_thread() is threading.main_thread()
            if handle_signals is None
            else handle_signals
        )
        self._previous_handlers: dict[int, Any] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Hosts:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def setup(self) -> Hosts:
        require_root()
        ensure_iptables()
        atexit.register(self.teardown)
        if self._handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def _build(self) -> None:
        # Choosing a free subnet and taking it (the bridge's address) is one step for every
        # process on this machine: two test runs at once (pytest-xdist workers) never pick the
        # same subnet.
        with open(SUBNET_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _in_use_subnets()
            free = [k for k in range(1, 255) if k not in used]
            if not free:
                raise NetnsError(f"no free {SUBNET_PREFIX}.K.0/24 subnet")
            k = free[int(self.run_id, 16) % len(free)]
            self.subnet = ipaddress.IPv4Network(f"{SUBNET_PREFIX}.{k}.0/24")
            self.gateway = f"{SUBNET_PREFIX}.{k}.1"
            sh(["ip", "link", "add", self.bridge, "type", "bridge"])
            sh(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            sh(["ip", "link", "set", self.bridge, "up"])
        for i in range(self.count):
            host = Host(
                index=i,
                namespace=f"rs-{self.run_id}-n{i}",
                address=f"{SUBNET_PREFIX}.{k}.{11 + i}",
                veth=f"rs{self.run_id}-h{i}",
            )
            self.hosts.append(host)
            peer = f"rs{self.run_id}-p{i}"
            sh(["ip", "netns", "add", host.namespace])
            sh(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", peer])
            sh(["ip", "link", "set", peer, "netns", host.namespace])
            sh(["ip", "link", "set", host.veth, "master", self.bridge])
            sh(["ip", "link", "set", host.veth, "up"])
            ns = ["ip", "netns", "exec", host.namespace]
            sh([*ns, "ip", "link", "set", "lo", "up"])
            sh([*ns, "ip", "link", "set", peer, "name", "eth0"])
            sh([*ns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"])
            sh([*ns, "ip", "link", "set", "eth0", "up"])
            self.iptables(i, "-N", CHAIN)
            self.iptables(i, "-I", "INPUT", "-j", CHAIN)
            self.iptables(i, "-I", "OUTPUT", "-j", CHAIN)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.teardown()
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

    def teardown(self) -> None:
        """Kill our processes, delete our namespaces and bridge. Safe to call many times."""
        with self._lock:
            if self._torn_down:
                return
            self._torn_down = True
        for proc in list(self._procs.values()):
            _kill(proc)
        for host in self.hosts or self._expected_hosts():
            _kill_inside(host.namespace)
            sh(["ip", "netns", "del", host.namespace], check=False)
            sh(["ip", "link", "del", host.veth], check=False)
        sh(["ip", "link", "del", self.bridge], check=False)
        if self._previous_handlers and threading.current_thread() is threading.main_thread():
            for sig, handler in self._previous_handlers.items():
                with contextlib.suppress(Exception):
                    signal.signal(sig, handler)
            self._previous_handlers.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.teardown)

    def _expected_hosts(self) -> list[Host]:
        return [
            Host(i, f"rs-{self.run_id}-n{i}", "", f"rs{self.run_id}-h{i}")
            for i in range(self.count)
        ]

    def leftovers(self) -> list[str]:
        """Anything of this run still present (empty after a clean teardown)."""
        return leftovers(self.run_id)

    # -- use ---------------------------------------------------------------------------------

    def ns_argv(self, i: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[i].namespace, *argv]

    def run(self, i: int, argv: Sequence[str], *, check: bool = True, timeout: float = 20) -> str:
        """A short command inside namespace i; its stdout."""
        return sh(self.ns_argv(i, argv), check=check, timeout=timeout)

    def start(
        self,
        i: int,
        argv: Sequence[str],
        *,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = subprocess.STDOUT,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """A long-running process inside namespace i, in its own session; PID tracked."""
        if self._torn_down:
            raise NetnsError("hosts already torn down")
        proc = subprocess.Popen(
            self.ns_argv(i, argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        with self._lock:
            self._procs[proc.pid] = proc
            self.hosts[i].pids.append(proc.pid)
        return proc

    def forget(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.pop(proc.pid, None)

    def iptables(self, i: int, *args: str) -> str:
        return self.run(i, ["iptables", "-w", "5", *args])

    # -- faults: rules in our chain inside namespace i ---------------------------------------

    def block(self, i: int, peers: Sequence[str]) -> None:
        """Silently drop all traffic between host i and the given peer addresses."""
        for peer in peers:
            self.iptables(i, "-A", CHAIN, "-s", peer, "-j", "DROP")
            self.iptables(i, "-A", CHAIN, "-d", peer, "-j", "DROP")

    def drop_randomly(self, i: int, peer: str, probability: float) -> None:
        """Drop each packet between host i and ``peer`` with ``probability`` (real loss)."""
        if not 0.0 < probability <= 1.0:
            raise ValueError(f"probability must be in (0, 1], got {probability}")
        for direction in ("-s", "-d"):
            self.iptables(
                i,
                "-A",
                CHAIN,
                direction,
                peer,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                f"{probability:.4f}",
                "-j",
                "DROP",
            )

    def heal(self, i: int) -> None:
        self.iptables(i, "-F", CHAIN)

    def delay(self, i: int, delay_ms: int) -> None:
        """Delay every packet leaving host i (needs sch_netem: see ``netem_available``)."""
        self.run(
            i,
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                "eth0",
                "root",
                "netem",
                "delay",
                f"{int(delay_ms)}ms",
            ],
        )

    def clear_delay(self, i: int) -> None:
        self.run(i, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)

    def heal_all(self) -> None:
        for host in self.hosts:
            self.heal(host.index)

    def rules(self, i: int) -> list[str]:
        return [
            line for line in self.iptables(i, "-S", CHAIN).splitlines() if line.startswith("-A ")
        ]

    def netem_available(self) -> str | None:
        """None if ``tc qdisc ... netem`` works in our namespaces, else why not."""
        if shutil.which("tc") is None:
            return "no `tc` command"
        done = subprocess.run(
            self.ns_argv(0, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]),
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            sh(self.ns_argv(0, ["tc", "qdisc", "del", "dev", "lo", "root"]), check=False)
            return None
        return f"tc qdisc netem is unavailable here: {done.stderr.strip() or done.returncode}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    for sig in (signal.SIGCONT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # its own session: the process and its children
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_TIMEOUT)


def _kill_inside(namespace: str) -> None:
    """SIGKILL what is still running inside one of OUR namespaces (only we start processes
    there), by PID, so the namespace can go."""
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split() if p.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        time.sleep(0.05)


def leftovers(run_id: str) -> list[str]:
    """Namespaces and links of run ``run_id`` that still exist."""
    found = [
        f"netns {line.split()[0]}"
        for line in sh(["ip", "netns", "list"], check=False).splitlines()
        if line.startswith(f"rs-{run_id}-")
    ]
    for line in sh(["ip", "-o", "link", "show"], check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name == f"rsbr-{run_id}" or name.startswith(f"rs{run_id}-"):
                found.append(f"link {name}")
    return found


def cleanup_run(run_id: str) -> list[str]:
    """Remove what run ``run_id`` left (after a crash of the runner); returns what it found."""
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id must be 6 lowercase hex digits, got {run_id!r}")
    found = leftovers(run_id)
    for item in found:
        kind, name = item.split(" ", 1)
        if kind == "netns":
            _kill_inside(name)
            sh(["ip", "netns", "del", name], check=False)
    for item in leftovers(run_id):
        kind, name = item.split(" ", 1)
        if kind == "link":
            sh(["ip", "link", "del", name], check=False)
    return found
