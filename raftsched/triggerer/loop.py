"""The triggerer's loop: lease triggers, run them all in one asyncio loop, renew their
leases, report firings (docs/architecture.md §17).

One asyncio loop holds every running trigger as a task; the blocking cluster calls run on
the loop's thread pool. A trigger's lease is renewed every ``heartbeat_interval`` while it
runs and until its firing is answered; a renewal the cluster refuses (the lease expired and
went to another triggerer, or its task was cleared) cancels it here, and a firing it refuses
is dropped: the cluster takes one firing per lease, and a trigger's task resumes once.
A trigger that raises is reported with its traceback (the task fails with it in its log);
the triggerer itself never stops for a trigger.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raftsched import retry
from raftsched.core import handlers_triggers as htr
from raftsched.core.model import TaskKey
from raftsched.core.xcom import MAX_XCOM_BYTES
from raftsched.errors import LimitExceeded
from raftsched.triggerer.transport import Firing, TriggerGrant
from raftsched.triggerer.triggers import run_trigger

log = logging.getLogger("raftsched.triggerer")

MAX_FIRINGS_PER_CALL = 500
HEARTBEAT_BATCH = 5_000  # refs per HeartbeatTriggers (the cluster takes 10,000 per command)
MAX_ERROR_CHARS = 60_000
FIRE_RETRY_PAUSE = 0.5  # seconds between two FireTriggers calls of a batch that failed
MAX_EVENT_BYTES = MAX_XCOM_BYTES  # FireTriggers' bound on an event (core/handlers_triggers.py)


@dataclass
class TriggererSettings:
    capacity: int = 1_000  # triggers run at once
    lease_ttl: float = 10.0
    heartbeat_interval: float = 2.0
    poll_wait: float = 2.0  # a LeaseTriggers long poll's wait


@dataclass
class Counters:
    """What the triggerer did (logged, and read by tests)."""

    leased: int = 0
    fired: int = 0  # firings the cluster took
    errors: int = 0  # triggers that raised
    refused: int = 0  # firings or renewals the cluster refused (the lease was not ours)
    running: int = 0


@dataclass
class _Held:
    grant: TriggerGrant
    task: asyncio.Task[Any] | None = None
    firing: Firing | None = None  # reported, not yet answered


class Triggerer:
    """``transport``: lease / heartbeat / fire (``triggerer.transport``). :meth:`run` blocks
    until :meth:`stop`."""

    def __init__(self, transport: Any, settings: TriggererSettings | None = None) -> None:
        self.transport = transport
        self.settings = settings or TriggererSettings()
        self.counters = Counters()
        self._held: dict[TaskKey, _Held] = {}
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fired: asyncio.Queue[Firing] | None = None

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._fired = asyncio.Queue()
        jobs = [
            asyncio.create_task(self._lease_loop(), name="lease"),
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._fire_loop(), name="fire"),
        ]
        while not self._stop.is_set():
            await asyncio.sleep(0.1)
        for job in jobs:
            job.cancel()
        for held in list(self._held.values()):
            if held.task is not None:
                held.task.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        log.info("triggerer stopped: %s", self.counters)

    # -- leases -------------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        while True:
            free = self.settings.capacity - len(self._held)
            if free <= 0:
                await asyncio.sleep(0.2)
                continue
            try:
                grants = await asyncio.to_thread(
                    self.transport.lease, free, self.settings.poll_wait
                )
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.info("LeaseTriggers failed: %s; retrying", err)
                await asyncio.sleep(1.0)
                continue
            if grants:  # one line per call, not per trigger
                log.info("leased %d trigger(s)", len(grants))
            for grant in grants:
                self._start(grant)

    def _start(self, grant: TriggerGrant) -> None:
        old = self._held.pop(grant.key, None)
        if old is not None and old.task is not None:
            old.task.cancel()  # its lease had expired: run it under the new token
        held = _Held(grant)
        held.task = asyncio.create_task(self._run_one(held), name=f"trigger {grant.key}")
        self._held[grant.key] = held
        self.counters.leased += 1
        self.counters.running = len(self._held)

    async def _run_one(self, held: _Held) -> None:
        grant = held.grant
        try:
            help = _Help(self.transport, grant)
            event = await run_trigger(grant.kind, grant.args_json, grant.fileloc, help)
            firing = _checked(Firing(grant.key, grant.token, event_json=event))
            self.counters.errors += bool(firing.error)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException:  # SystemExit too: asyncio would let it out and stop the loop
            self.counters.errors += 1
            error = traceback.format_exc()[-MAX_ERROR_CHARS:]
            log.info("trigger of %s raised: %s", grant.key, error.strip().splitlines()[-1])
            firing = Firing(grant.key, grant.token, error=error)
        held.firing = firing
        assert self._fired is not None
        await self._fired.put(firing)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            every = [(key, held.grant.token) for key, held in self._held.items()]
            for start in range(0, len(every), HEARTBEAT_BATCH):
                await self._renew(every[start : start + HEARTBEAT_BATCH])

    async def _renew(self, refs: list[tuple[TaskKey, int]]) -> None:
        """One HeartbeatTriggers call: a command holds at most MAX_ITEMS_PER_COMMAND refs,
        so a triggerer holding more renews them in batches."""
        if refs:
            try:
                answers = await asyncio.to_thread(self.transport.heartbeat, refs)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.info("HeartbeatTriggers failed: %s", err)
                return
            for (key, token), ok in zip(refs, answers, strict=False):
                held = self._held.get(key)
                if ok or held is None or held.grant.token != token:
                    continue
                self.counters.refused += 1
                log.info("the lease of the trigger of %s is no longer ours: stopped", key)
                self._drop(key)

    def _drop(self, key: TaskKey) -> None:
        held = self._held.pop(key, None)
        if held is not None and held.task is not None and not held.task.done():
            held.task.cancel()
        self.counters.running = len(self._held)

    async def _fire_loop(self) -> None:
        assert self._fired is not None
        while True:
            batch = [await self._fired.get()]
            while not self._fired.empty() and len(batch) < MAX_FIRINGS_PER_CALL:
                batch.append(self._fired.get_nowait())
            batch = [f for f in batch if self._current(f)]
            if not batch:
                continue
            try:  # every 0.5 s while it fails, for as long as the leases may live
                refused = await retry.until_async(
                    lambda batch=batch: asyncio.to_thread(self.transport.fire, batch),
                    deadline=self.settings.lease_ttl,
                    every=FIRE_RETRY_PAUSE,
                    retry_on=lambda err: isinstance(err, Exception),  # never a cancellation
                    on_retry=lambda err: log.info("FireTriggers failed: %s; retrying", err),
                )
            except retry.GaveUp as gave_up:  # the leases are gone by now
                err = gave_up.last_attempt.exception()
                log.info("firings dropped (%s): their leases expired", err)
                for firing in batch:
                    self._drop(firing.key)
                continue
            for firing, why in zip(batch, refused, strict=False):
                if why:
                    self.counters.refused += 1
                    log.info("firing of %s refused (%s)", firing.key, why)
                elif not firing.error:
                    self.counters.fired += 1
                if self._current(firing):
                    self._drop(firing.key)

    def _current(self, firing: Firing) -> bool:
        held = self._held.get(firing.key)
        return held is not None and held.grant.token == firing.token


def _checked(firing: Firing) -> Firing:
    """The firing, or an error firing when its event is one FireTriggers would refuse (over
    64 KiB, nested too deep): the cluster refuses the whole call for one such event, which
    would hold back every firing beside it until their leases expired, again and again."""
    try:
        htr.check_json_text("event", firing.event_json, MAX_EVENT_BYTES, obj=False)
    except LimitExceeded as err:
        error = f"TriggerError: the trigger's event was refused: {err}"
        return Firing(firing.key, firing.token, error=error)
    return firing


class _Help:
    """What a trigger may ask the cluster (``cluster_triggers.ClusterHelp``), always under
    its own lease: the node refuses once that lease is not this triggerer's."""

    def __init__(self, transport: Any, grant: TriggerGrant) -> None:
        self.transport, self.grant = transport, grant

    def connection(self, conn_id: str) -> str:
        return str(self.transport.resolve_connection(self.grant.key, self.grant.token, conn_id))

    def external_state(
        self, dag_id: str, logical_date: datetime, task_ids: list[str]
    ) -> tuple[bool, str, list[str]]:
        key, token = self.grant.key, self.grant.token
        return self.transport.external_state(key, token, dag_id, logical_date, task_ids)  # type: ignore[no-any-return]
