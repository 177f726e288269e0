"""Workers' calls that arrive together go out as one Raft entry (every
entry is pickled, fsynced, sent and applied by every node).

One completion per entry was most of a task's cost on the scheduler nodes: every entry is
pickled, written, fsynced, sent to and applied by every node. :class:`CommandBatcher` is a
group commit at the servicer: the commands of concurrent calls (outcomes, log chunks,
heartbeats, releases and the leases asked meanwhile) are proposed together as one
:class:`~raftsched.core.commands.Batch`, the batch command release 1 already had: no new
command class, and each sub-command passes the mixed-release gate as it would alone.

Contract of :meth:`CommandBatcher.propose` (what ``ApiContext.propose`` promises, for one
command):

- It returns the command's own apply Result. Each command keeps its own request id, so a
  caller's retry is answered with its first result, whichever entry carried it.
- Order inside an entry: reports first, leases last, so a lease committed with a completion
  already sees the task the completion queued (the next step of a chain is leased in the same
  commit round as its upstream's outcome).
- Group commit: a proposer thread takes everything waiting (when it holds an outcome or log
  chunks of a worker whose last heartbeat named :data:`BUSY_HELD` leases or more, it first
  waits up to :data:`BUSY_LINGER` for the rest of the burst); while its entry is in flight
  the next calls gather for the next one. A command alone is proposed bare, as before.
- Riders (:meth:`ride`): long polls waiting on this node have their next LeaseTasks appended
  to the next entry holding a success or a release (:func:`_may_queue`), at most
  :data:`MAX_RIDERS` of them, only while their caller is there.
- Bounded: at most :data:`MAX_COMMANDS` commands and about :data:`MAX_CHARS` characters of
  text per entry; a larger command goes alone.
- An entry refused as a whole (REQUEST_DENIED: the node's DB/log gate refuses its leases; the
  mixed-release gate refuses one sub-command) is not forced: each of its callers proposes its
  own command alone and gets its own answer. No quorum, a commit timeout: every caller of the
  entry gets that error (the outcome is unknown; retrying with the same id is safe).
- A caller waits no longer than its call's deadline allows (CommitTimeout past it).

Thread-safe; the proposer threads are daemons, started on first use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.errors import CommitTimeout, NoQuorumError, RaftschedError, StatusError

if TYPE_CHECKING:
    from raftsched.api.servicers.context import ApiContext

log = logging.getLogger(__name__)

# Seconds an outcome waits for the rest of its burst: none from a worker with few leases (a
# chain's next step rides with the outcome anyway, see Rider; waiting would only delay it)...
LINGER = 0.0
# ...10 ms from a worker whose last heartbeat named 8 leases or more: it ends attempts often
# (1,000 one-line tasks on 32 slots: 0.47 entries per task instead of 1.33, and sooner done).
BUSY_HELD = 8
BUSY_LINGER = 0.010
MAX_WORKERS_NOTED = 10_000
MAX_COMMANDS = 64  # commands per entry
MAX_CHARS = 512 * 1024  # characters of log text, messages and return values per entry
THREADS = 2  # entries of one node in flight at once
_REPORTS = (c.CompleteAttempt, c.AppendLogs)  # what a lingering entry waits for more of
_LAST = (c.LeaseTasks,)  # placed after every report of the same entry
MAX_RIDERS = 16  # waiting long polls whose LeaseTasks ride in one entry


def _may_queue(command: c.Command) -> bool:
    """Whether committing it may leave a task queued: a success (its downstream tasks), a
    release (its tasks again)."""
    return isinstance(command, c.ReleaseLeases) or (
        isinstance(command, c.CompleteAttempt) and command.success
    )


def text_size(command: c.Command) -> int:
    """The characters a command carries that a worker chose (its entry's size, roughly)."""
    size = len(getattr(command, "message", "") or "") + len(
        getattr(command, "result_json", "") or ""
    )
    for chunk in getattr(command, "chunks", ()) or ():
        size += len(chunk.text)
    return size


class _Item:
    __slots__ = ("command", "done", "error", "fallback", "on_done", "result", "size")

    def __init__(self, command: c.Command, on_done: Callable[[], None] | None = None) -> None:
        self.command = command
        self.size = text_size(command)
        self.done = threading.Event()
        self.result: r.Result | None = None
        self.error: BaseException | None = None
        self.fallback = False  # propose it alone (the entry was refused as a whole)
        self.on_done = on_done

    def settle(self) -> None:
        self.done.set()
        if self.on_done is not None:
            self.on_done()


class Rider:
    """A long poll waiting for work on this node: its next LeaseTasks (``command``, built on
    the poll's own thread: its request id carries the caller's scope) rides in the next entry
    that carries an outcome or a release (which may queue tasks), instead of an entry of its
    own after that one commits. ``wake`` is called once its result is known; ``active`` says
    the caller is still there (a poll whose worker left is not granted anything)."""

    __slots__ = ("active", "command", "item", "wake")

    def __init__(
        self, command: c.Command, wake: Callable[[], None], active: Callable[[], bool]
    ) -> None:
        self.command = command
        self.wake = wake
        self.active = active
        self.item: _Item | None = None  # set when an entry took it


class CommandBatcher:
    def __init__(
        self,
        ctx: ApiContext,
        *,
        linger: float = LINGER,
        busy_linger: float = BUSY_LINGER,
        threads: int = THREADS,
    ) -> None:
        self.ctx = ctx
        self.linger = linger
        self.busy_linger = busy_linger
        self._threads = max(1, threads)
        self._cond = threading.Condition()
        self._waiting: deque[_Item] = deque()
        self._started = False
        self._gathering = False  # a thread is gathering the next entry (under _cond)
        self._riders: list[Rider] = []
        self._held: dict[str, int] = {}  # worker id -> leases its last heartbeat named
        self.entries = 0  # entries proposed (tests and benchmarks read them)
        self.commands = 0

    def propose(self, command: c.Command, context: grpc.ServicerContext | None = None) -> r.Result:
        budget = self._budget(context)
        (item,) = self._enqueue([command])
        return self.outcome(item, context, budget)

    def propose_all(
        self, commands: list[c.Command], context: grpc.ServicerContext | None = None
    ) -> list[r.Result | Exception]:
        """Each command's Result, or the error ``propose`` would have raised for it: one
        call's commands (CompleteBatch) wait together, so they share an entry."""
        end = time.monotonic() + self._budget(context)
        items = self._enqueue(commands)
        out: list[r.Result | Exception] = []
        for item in items:
            try:
                out.append(self.outcome(item, context, max(0.0, end - time.monotonic())))
            except Exception as err:
                out.append(err)
        return out

    def _enqueue(self, commands: list[c.Command]) -> list[_Item]:
        """Hand the commands to the proposer thread, together (so they share an entry)."""
        items = [_Item(command) for command in commands]
        with self._cond:
            self._start()
            self._waiting.extend(items)
            self._cond.notify_all()
        return items

    def outcome(
        self, item: _Item, context: grpc.ServicerContext | None, budget: float | None = None
    ) -> r.Result:
        """``item``'s Result once its entry committed (the errors of ``propose``)."""
        command = item.command
        budget = self._budget(context) if budget is None else budget
        if not item.done.wait(budget):
            raise CommitTimeout(command.request_id, budget)
        if item.fallback:
            return self.ctx.propose(command, context)
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def note_held(self, worker_id: str, leases: int) -> None:
        """What a worker's heartbeat said it holds: a busy worker's reports linger longer."""
        with self._cond:
            if len(self._held) >= MAX_WORKERS_NOTED and worker_id not in self._held:
                self._held.clear()  # bounded; a worker is noted again at its next heartbeat
            self._held[worker_id] = leases

    def _linger(self) -> float:
        """How long the waiting calls wait for more (under ``_cond``)."""
        linger = 0.0
        for item in self._waiting:
            if isinstance(item.command, _REPORTS):
                busy = self._held.get(item.command.worker_id, 0) >= BUSY_HELD
                linger = max(linger, self.busy_linger if busy else self.linger)
        return linger

    def ride(self, rider: Rider) -> None:
        """Let a waiting long poll's next LeaseTasks ride in the next entry with an outcome."""
        with self._cond:
            self._riders.append(rider)

    def unride(self, rider: Rider) -> _Item | None:
        """Stop riding; the item its command went out in, if an entry took it."""
        with self._cond:
            if rider in self._riders:
                self._riders.remove(rider)
            return rider.item

    def _budget(self, context: grpc.ServicerContext | None) -> float:
        """How long a caller waits for its entry: what ``ApiContext.propose`` would allow,
        plus the leader wait it may spend first."""
        budget = self.ctx.proposer.deadline + 3.0
        remaining = None
        if context is not None:
            try:
                remaining = context.time_remaining()
            except Exception:
                remaining = None
        if remaining is not None and remaining < 1e6:
            budget = min(budget, max(0.2, remaining - 0.3))
        return budget

    # -- the proposer threads ---------------------------------------------------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        for i in range(self._threads):
            threading.Thread(target=self._run, name=f"worker-batch-{i}", daemon=True).start()

    def _run(self) -> None:
        while True:
            items = self._take()
            try:
                self._propose(items)
            except Exception as err:  # never leave a caller waiting
                log.exception("batched proposal failed")
                for item in items:
                    if not item.done.is_set():
                        item.error = err
                        item.settle()

    def _take(self) -> list[_Item]:
        """The next entry's items; one thread gathers at a time (the other may be proposing)."""
        with self._cond:
            while True:
                while not self._waiting or self._gathering:
                    self._cond.wait()
                self._gathering = True
                try:
                    items = self._gather()
                finally:
                    self._gathering = False
                    self._cond.notify_all()
                if items:
                    return items

    def _gather(self) -> list[_Item]:
        linger = self._linger()
        if linger > 0:
            end = time.monotonic() + linger
            while len(self._waiting) < MAX_COMMANDS and (left := end - time.monotonic()) > 0:
                self._cond.wait(left)
        items: list[_Item] = []
        size = 0
        while self._waiting and len(items) < MAX_COMMANDS:
            nxt = self._waiting[0]
            if items and size + nxt.size > MAX_CHARS:
                break
            items.append(self._waiting.popleft())
            size += nxt.size
        if items and self._riders and any(_may_queue(i.command) for i in items):
            self._board(items)
        return items

    def _board(self, items: list[_Item]) -> None:
        """Riders' LeaseTasks join this entry (after its outcomes: they see what those queued).
        Not the poll of a worker whose outcomes' call leases in this entry already
        (CompleteBatch's ``next``): that lease takes what the outcomes queued for it, and a
        task left queued wakes the poll anyway."""
        leasing = {i.command.worker_id for i in items if isinstance(i.command, c.LeaseTasks)}
        riders = [x for x in self._riders if x.command.worker_id not in leasing]
        for rider in riders[: max(0, MAX_COMMANDS - len(items))][:MAX_RIDERS]:
            self._riders.remove(rider)
            try:
                if not rider.active():
                    continue
                rider.item = _Item(rider.command, rider.wake)
            except Exception:
                log.exception("a long poll could not ride")
                continue
            items.append(rider.item)

    def _propose(self, items: list[_Item]) -> None:
        # reports first, leases last (stable: each kind keeps its arrival order)
        items.sort(key=lambda i: isinstance(i.command, _LAST))
        self.entries += 1
        self.commands += len(items)
        if self.entries % 100 == 0:
            log.debug("worker calls: %d commands in %d entries", self.commands, self.entries)
        if len(items) == 1:
            item = items[0]
            self._settle(item, lambda: self.ctx.propose(item.command))
            return
        batch = self.ctx.make(c.Batch, "", commands=tuple(i.command for i in items))
        try:
            result = self.ctx.propose(batch)
        except (NoQuorumError, CommitTimeout, StatusError) as err:
            for item in items:
                item.error = err
                item.settle()
            return
        except RaftschedError as err:  # refused as a whole: each on its own
            log.debug("batch of %d refused (%s): proposed one by one", len(items), err)
            for item in items:
                item.fallback = True
                item.settle()
            return
        subs = result.value if isinstance(result.value, tuple) else None
        if subs is None or len(subs) != len(items):
            # the Batch itself was refused (halted, or a check it should have passed)
            for item in items:
                if result.reason == r.HALTED:
                    item.result = result
                else:
                    item.fallback = True
                item.settle()
            return
        for item, sub in zip(items, subs, strict=True):
            item.result = sub
            item.settle()

    @staticmethod
    def _settle(item: _Item, fn: Any) -> None:
        try:
            item.result = fn()
        except BaseException as err:
            item.error = err
        item.settle()
