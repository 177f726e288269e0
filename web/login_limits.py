"""How many logins this webserver process checks: per client, per user name, and at once.

A login costs a password check (scrypt: about 136 ms of CPU), done here on the webserver
(``auth.py``), never on a scheduler node. Anyone can post the login form, so the checks are
bounded before they start, and a refusal is HTTP 429 with ``Retry-After``:

- per client (its address; an IPv6 client by its /64, which one host can fill): every checked
  login takes a token of a bucket of ``LOGIN_CLIENT_BURST`` refilled at
  ``LOGIN_CLIENT_PER_MINUTE``. Behind nginx the address is the one nginx saw, from
  X-Forwarded-For, only with ``PROXY_FIX`` on (it trusts exactly one proxy hop), so a client
  cannot pick its own;
- per user name: every failed login takes a token of a bucket of ``LOGIN_USER_BURST`` refilled
  at ``LOGIN_USER_PER_MINUTE``; while it is empty that name is not checked at all (password
  guessing from many addresses). A success takes nothing;
- at once: ``LOGIN_CONCURRENCY`` checks per process; a login that waits more than
  :data:`BUSY_WAIT` for one is refused (a flood from many addresses costs each process at most
  that many cores).

The buckets live in this process (in-memory token buckets, no new dependency and no shared
store to run): with gunicorn's ``workers`` processes and N webservers behind round-robin nginx,
a client gets up to ``workers * N`` times the figures above. Flask-Limiter would need Redis or
memcached for limits shared between processes, a service raftsched does not otherwise have;
the per-process bound still caps the CPU a flood can take, and a guesser's rate. Each map
keeps at most :data:`MAX_KEYS` keys (least recently used leave first).
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from raftsched.errors import LoginThrottled

MAX_KEYS = 10_000
BUSY_WAIT = 2.0  # seconds a login waits for a check slot before 429


class TokenBuckets:
    """One token bucket per key: ``burst`` tokens, refilled at ``per_minute``. Thread-safe."""

    def __init__(
        self,
        burst: int,
        per_minute: float,
        *,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = max(1, int(burst))
        self.rate = max(float(per_minute), 1e-6) / 60.0  # tokens per second
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def _tokens(self, key: str) -> float:
        """The key's tokens now (under the lock); the key becomes the most recently used."""
        now = self._clock()
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return tokens

    def wait(self, key: str) -> float:
        """Seconds until ``key`` has a token (0: it has one now)."""
        with self._lock:
            tokens = self._tokens(key)
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def take(self, key: str) -> float:
        """Take a token of ``key``: 0 when there was one, else the seconds until there is
        (nothing is taken then)."""
        with self._lock:
            tokens = self._tokens(key)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, self._buckets[key][1])
                return 0.0
        return (1 - tokens) / self.rate


class LoginGuard:
    """The limits of one process around the password check (see the module docstring)."""

    def __init__(
        self,
        *,
        client_burst: int,
        client_per_minute: float,
        user_burst: int,
        user_per_minute: float,
        concurrency: int,
        busy_wait: float = BUSY_WAIT,
    ) -> None:
        self.clients = TokenBuckets(client_burst, client_per_minute)
        self.users = TokenBuckets(user_burst, user_per_minute)
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self._busy_wait = busy_wait

    def admit(self, client: str, username: str) -> None:
        """Take the client's token for this login; LoginThrottled (its ``retry_after``) when
        the client has none left, or when the user name is locked by its failures."""
        wait = self.clients.take(client)
        if wait:
            raise LoginThrottled("client", wait)
        wait = self.users.wait(username)
        if wait:
            raise LoginThrottled("user", wait)

    @contextlib.contextmanager
    def checking(self) -> Iterator[None]:
        """Hold one of the process's check slots for the password check (only the check: a
        slow cluster answering the hash does not take one); LoginThrottled("busy") when none
        frees within the busy wait."""
        if not self._slots.acquire(timeout=self._busy_wait):
            raise LoginThrottled("busy", self._busy_wait)
        try:
            yield
        finally:
            self._slots.release()

    def failed(self, username: str) -> None:
        """A wrong password (or no such user): one of the name's tokens goes."""
        self.users.take(username)


def client_key(address: str | None) -> str:
    """The bucket of a client address: an IPv4 address itself, an IPv6 one by its /64."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
