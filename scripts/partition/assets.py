"""Assets in the partition run: a producer DAG with outlets, events posted from outside with
client event ids (retried on error), two consumer DAGs, and invariant 9, "every asset event
is consumed exactly once" (docs/architecture.md §4, §21).

The DAGs (``dag_files``; every task runs the workload's ``TASK_SCRIPT``, so invariants 2, 3
and 6 see their executions too)::

    pt_asset_producer  * * * * * */4, catch-up   make (0-1 s), outlets=[ASSET_A, ASSET_B]
    pt_asset_all       schedule=ASSET_A & ASSET_C (AssetAll)     use (0-1 s)
    pt_asset_any       schedule=ASSET_B | ASSET_C (AssetAny)     use (0-1 s)

``Poster``: one client in the root namespace that, during the faults, sends an event of
``ASSET_C`` every ``POST_INTERVAL`` seconds through ``AssetService.EmitAssetEvent`` with a
client event id of its own; on any error (a node cut off, the leader killed, no quorum) it
sends the *same* id again until an answer comes or ``RETRY_FOR`` passes; and every
``RESEND_EVERY``-th event it sends once more after its answer, as a client that lost the
answer would. Every ``HASTY_EVERY``-th event is first sent with a 20 ms deadline, which
mostly expires after the event was committed (an answer lost on the way back), so the send
after the error is one of an id the cluster already has, whether or not a fault is on at
that moment. Each id's record says how many sends it took and what the answers were.

Invariant 9 (:func:`check_assets_consumed_once`), over the DB's ``asset_event`` and
``asset_event_run`` rows (written from the committed ASSET_EVENT and ASSET_RUN entries),
the runs, the attempts and the poster's records. For every event and every DAG whose asset
condition names its URI (a consumer):

- DUPLICATE_CONSUMER: two or more runs of the consumer carry the event;
- MISSING_CONSUMER: no run carries it, yet a later run of the consumer was made (that run
  took the consumer's whole queue, so it had to carry it; unless ``MAX_EVENTS_KEPT`` newer
  events of its asset pushed it out of the bounded queue), or the consumer's pending events
  (carried by no run) satisfy its condition after the cluster settled (the run that apply
  owed was never made);
- WRONG_DAG: a run carries an event of an asset its DAG's condition does not name;
- UNKNOWN_EVENT / NO_RUN: a carried event id that no event has, or a carrying run that is
  not an asset-triggered run of that DAG;
- UNSATISFIED_RUN: an asset-triggered run whose carried events do not satisfy its DAG's
  condition (or that carries none);
- WRONG_EVENTS_SEEN: a consumer attempt was given (``RAFTSCHED_ASSET_EVENTS``, from its
  lease; its task's first command records them, ``SEEN_RECORD``) other events than the
  newest ``MAX_RUN_EVENTS`` its run carries.

From the producer side: OUTLET_MISSING / OUTLET_DUPLICATE, a successful attempt of a task
with outlets that made no event, or two, of an outlet; PHANTOM_EVENT, an event naming an
attempt that did not succeed. From the client's: DUPLICATE_EVENT, one client event id with
two events; ACKED_EVENT_LOST, an answered id with no event; ACK_MISMATCH, an answer naming
another event than the one the id has. VACUOUS when no (event, consumer) pair was checked.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from raftsched.core import asset_condition as ac
from raftsched.core.asset_commands import MAX_RUN_EVENTS
from raftsched.core.asset_table import MAX_EVENTS_KEPT
from raftsched.core.model import DagSpec
from scripts.partition.verdict import Verdict

ASSET_A = "s3://pt-lake/a"
ASSET_B = "s3://pt-lake/b"
ASSET_C = "file:///pt-landing/c.csv"
PRODUCER = "pt_asset_producer"
CONSUMER_ALL = "pt_asset_all"
CONSUMER_ANY = "pt_asset_any"
ASSETS_SINCE = 3  # the cluster version that accepts assets (core/asset_commands.SINCE_RELEASE)

POST_INTERVAL = 2.0  # seconds between two new events of the poster
RETRY_FOR = 20.0  # seconds one event id is sent again (on errors) before the poster gives up
RETRY_PAUSE = 0.5
RESEND_EVERY = 5  # every 5th event is sent once more after its answer (a lost answer)
# Per send, the client's own retries across nodes included (each send is a new request id,
# so only the event id dedups): short, so a leader change fails sends that the poster makes
# again, some after the first had committed (their answer: duplicate)
DEADLINE = 1.5
ATTEMPT = 0.5
# Every HASTY_EVERY-th event is first sent with a deadline too short for its answer: the call
# fails though the event is (mostly) committed, as a client whose answer a partition ate; the
# send that follows must get "duplicate", not a second event
HASTY_EVERY = 3
HASTY_DEADLINE = 0.02
CONSUMERS_TIMEOUT = 60.0  # seconds the poster waits for the consumer DAGs to be registered
# A consumer task's first command: what its attempt was given (RAFTSCHED_ASSET_EVENTS, its
# run's events as the lease carried them) to the worker's JSONL file, as a "consumed" record
SEEN_RECORD = (
    r"""printf '{"event":"consumed","dag_id":"%s","run_id":"%s","try":%d,"worker":"%s","""
    r""""events":%s}\n' "$RAFTSCHED_DAG_ID" "$RAFTSCHED_RUN_ID" "$RAFTSCHED_TRY_NUMBER" """
    r""""${PT_WORKER:-?}" "${RAFTSCHED_ASSET_EVENTS:-null}" >>"$PT_EXEC_LOG" """
)


# -- the workload ---------------------------------------------------------------------------


def dag_files(start: datetime, end: datetime, task_script: Path) -> dict[str, str]:
    """The producer (scheduled over [start, end], catch-up) and the two consumers, in one
    file: one parse registers the three together, so no producer event can come before its
    consumers exist (it would be queued for none, and the checker would call it missing)."""
    head = textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, Asset, BashTask

        COMMAND = {f"exec bash {task_script} 1 0"!r}
        CONSUME = {f"{SEEN_RECORD}; exec bash {task_script} 1 0"!r}
        A, B, C = Asset({ASSET_A!r}), Asset({ASSET_B!r}), Asset({ASSET_C!r})
        """
    )
    producer = textwrap.dedent(
        f"""
        with DAG(
            {PRODUCER!r},
            schedule="* * * * * */4",
            start_date=datetime.fromisoformat({start.isoformat()!r}),
            end_date=datetime.fromisoformat({end.isoformat()!r}),
            catchup=True,
            max_active_runs=1000000,
        ):
            BashTask("make", command=COMMAND, outlets=[A, B])
        """
    )

    def consumer(dag_id: str, schedule: str) -> str:
        return textwrap.dedent(
            f"""
            with DAG({dag_id!r}, schedule={schedule}, max_active_runs=1000000):
                BashTask("use", command=CONSUME)
            """
        )

    consumers = consumer(CONSUMER_ALL, "A & C") + consumer(CONSUMER_ANY, "B | C")
    return {"pt_assets.py": head + producer + consumers}


def wait_release(cluster: Any, timeout: float) -> bool:
    """Until every node reports a cluster version that accepts assets (a fresh cluster
    starts older and finalizes within seconds); False at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = [int((s or {}).get("cluster_version") or 0) for s in cluster.statuses().values()]
        if found and min(found) >= ASSETS_SINCE:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


@dataclass
class PostRecord:
    """One client event id and what sending it came to."""

    key: str
    uri: str
    sends: int = 0
    errors: list[str] = field(default_factory=list)
    acked: bool = False
    event_id: int | None = None  # the first answer's event id
    answers: list[tuple[int, bool]] = field(default_factory=list)  # (event id, duplicate)


class Poster:
    """Sends events of ``ASSET_C`` with client event ids through the faults (a thread)."""

    def __init__(self, servers: Sequence[str], token: str, run_id: str) -> None:
        from raftsched.api.client import RaftschedClient

        self.client = RaftschedClient(
            list(servers), token=token, deadline=DEADLINE, attempt_timeout=ATTEMPT
        )
        self.hasty = RaftschedClient(
            list(servers), token=token, deadline=HASTY_DEADLINE, attempt_timeout=HASTY_DEADLINE
        )
        self.prefix = f"pt-{run_id}-"
        self.posts: list[PostRecord] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="asset-poster", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sending (an id being retried gets no more sends) and wait for the thread."""
        self._stop.set()
        self._thread.join(RETRY_FOR + DEADLINE * 2)
        self.client.close()
        self.hasty.close()

    def _consumers_known(self) -> bool:
        """Both consumer DAGs are registered: an event sent before would reach neither."""
        from raftsched.api.gen import dag_pb2
        from raftsched.errors import RaftschedError

        try:
            for dag_id in (CONSUMER_ALL, CONSUMER_ANY):
                self.client.dags.GetDag(dag_pb2.GetDagRequest(dag_id=dag_id))
        except RaftschedError:
            return False
        return True

    def _loop(self) -> None:
        until = time.monotonic() + CONSUMERS_TIMEOUT
        while not self._consumers_known():
            if self._stop.wait(RETRY_PAUSE) or time.monotonic() > until:
                return  # no event at all: invariant 9 says VACUOUS unless the producer's came
        n = 0
        while not self._stop.wait(POST_INTERVAL):
            n += 1
            rec = PostRecord(f"{self.prefix}{n}", ASSET_C)
            self.posts.append(rec)
            if n % HASTY_EVERY == 0:
                self._send(rec, json.dumps({"n": n}), self.hasty)
            self._send_until_answered(rec, json.dumps({"n": n}))
            if rec.acked and n % RESEND_EVERY == 0 and not self._stop.is_set():
                self._send(rec, json.dumps({"n": n}))  # the answer "was lost": once more

    def _send_until_answered(self, rec: PostRecord, extra: str) -> None:
        until = time.monotonic() + RETRY_FOR
        while not rec.acked and not self._stop.is_set() and time.monotonic() < until:
            if self._send(rec, extra):
                return
            self._stop.wait(RETRY_PAUSE)

    def _send(self, rec: PostRecord, extra: str, client: Any = None) -> bool:
        from raftsched.api.gen import asset_pb2
        from raftsched.errors import RaftschedError

        request = asset_pb2.EmitAssetEventRequest(uri=rec.uri, extra_json=extra, event_id=rec.key)
        rec.sends += 1
        try:
            reply = (client or self.client).assets.EmitAssetEvent(request)
        except RaftschedError as err:  # ApiError (UNAVAILABLE, DEADLINE...), NoQuorumError
            rec.errors.append(str(getattr(err, "code", type(err).__name__)))
            return False
        rec.answers.append((int(reply.id), bool(reply.duplicate)))
        if not rec.acked:
            rec.acked, rec.event_id = True, int(reply.id)
        return True


# -- the rows -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventRow:
    """An ``asset_event`` row: ``source`` names the attempt that made it ("" for outside)."""

    id: int
    uri: str
    key: str = ""
    source: tuple[str, str, str, int] = ("", "", "", 0)


@dataclass(frozen=True, slots=True)
class CarryRow:
    """An ``asset_event_run`` row: the run (dag_id, run_id) carried the event."""

    event_id: int
    dag_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class Seen:
    """A consumer attempt's "consumed" record: the event ids its lease gave it."""

    dag_id: str
    run_id: str
    try_number: int
    event_ids: tuple[int, ...]


@dataclass
class AssetHistory:
    events: Sequence[EventRow]
    carried: Sequence[CarryRow]
    posts: Sequence[PostRecord] = ()
    seen: Sequence[Seen] = ()


def load_seen(paths: Iterable[Path]) -> list[Seen]:
    """The "consumed" records of the workers' JSONL files (a torn line is skipped)."""
    out = []
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
                if rec.get("event") != "consumed":
                    continue
                ids = tuple(sorted(int(e["id"]) for e in rec["events"] or ()))
                out.append(Seen(str(rec["dag_id"]), str(rec["run_id"]), int(rec["try"]), ids))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return out


def load_asset_history(engine: Any, posts: Sequence[PostRecord] = ()) -> AssetHistory:
    import sqlalchemy as sa

    from raftsched.store import tables as t

    ev, er = t.asset_event.c, t.asset_event_run.c
    with engine.connect() as conn:
        events = [
            EventRow(
                int(r.id),
                r.uri,
                r.event_key,
                (r.source_dag_id, r.source_run_id, r.source_task_id, int(r.source_try)),
            )
            for r in conn.execute(
                sa.select(
                    ev.id,
                    ev.uri,
                    ev.event_key,
                    ev.source_dag_id,
                    ev.source_run_id,
                    ev.source_task_id,
                    ev.source_try,
                )
            )
        ]
        carried = [
            CarryRow(int(r.event_id), r.dag_id, r.run_id)
            for r in conn.execute(sa.select(er.event_id, er.dag_id, er.run_id))
        ]
    return AssetHistory(sorted(events, key=lambda e: e.id), carried, posts)


# -- invariant 9 ----------------------------------------------------------------------------


def check_assets_consumed_once(
    dags: Sequence[DagSpec],
    runs: Sequence[Any],
    attempts: Sequence[Any],
    assets: AssetHistory,
    *,
    paused: Iterable[str] = (),
    require_events: bool = True,
) -> Verdict:
    verdict = Verdict("assets_consumed_once")
    events = {e.id: e for e in assets.events}
    conditions = {s.dag_id: ac.parse(s.asset_condition) for s in dags if s.asset_condition}
    asset_runs = {(r.dag_id, r.run_id) for r in runs if r.run_type == "asset_triggered"}
    carriers: dict[tuple[str, int], list[str]] = defaultdict(list)  # (dag, event) -> runs
    by_run: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row in assets.carried:
        by_run[(row.dag_id, row.run_id)].append(row.event_id)
        carriers[(row.dag_id, row.event_id)].append(row.run_id)
        _check_carry(verdict, row, events.get(row.event_id), conditions, asset_runs)
    for dag_id, run_id in sorted(asset_runs):
        have = frozenset(events[i].uri for i in by_run.get((dag_id, run_id), ()) if i in events)
        condition = conditions.get(dag_id)
        if condition is None or not ac.satisfied(condition, have):
            verdict.add(
                "UNSATISFIED_RUN",
                f"{dag_id}/{run_id} is asset-triggered but its events ({sorted(have)})"
                " do not satisfy its condition",
                dag_id=dag_id,
                run_id=run_id,
                uris=sorted(have),
            )
    pairs = 0
    pending_total = 0
    for dag_id, condition in sorted(conditions.items()):
        mine = [e for e in assets.events if e.uri in ac.uris_of(condition)]
        pairs += len(mine)
        pending = _check_consumer(verdict, dag_id, condition, mine, carriers, dag_id in paused)
        pending_total += len(pending)
    verdict.checked = pairs + len(assets.seen)
    for seen in assets.seen:  # what each consumer attempt was given: its run's events
        owed = tuple(sorted(by_run.get((seen.dag_id, seen.run_id), ())))[-MAX_RUN_EVENTS:]
        if seen.event_ids != owed:
            verdict.add(
                "WRONG_EVENTS_SEEN",
                f"{seen.dag_id}/{seen.run_id} try {seen.try_number} was given events"
                f" {list(seen.event_ids)}, its run carries {list(owed)}",
                dag_id=seen.dag_id,
                run_id=seen.run_id,
                try_number=seen.try_number,
                seen=list(seen.event_ids),
                carried=list(owed),
            )
    produced = _check_producers(verdict, dags, attempts, assets.events)
    keys = _check_client_ids(verdict, assets)
    verdict.checked += produced + keys
    verdict.notes.append(
        f"{len(events)} events, {pairs} (event, consumer) pairs, {len(asset_runs)}"
        f" asset-triggered runs, {pending_total} pending at the end (condition not yet met),"
        f" {produced} producer successes, {keys} client event ids, {len(assets.seen)}"
        " consumer attempts given their run's events"
    )
    if require_events and not pairs:
        verdict.add("VACUOUS", "no asset event reached a consumer DAG: invariant 9 checked nothing")
    return verdict


def _check_carry(
    verdict: Verdict,
    row: CarryRow,
    event: EventRow | None,
    conditions: Mapping[str, Any],
    asset_runs: set[tuple[str, str]],
) -> None:
    name = f"{row.dag_id}/{row.run_id}"
    if event is None:
        verdict.add(
            "UNKNOWN_EVENT",
            f"{name} carries event {row.event_id}, which no committed event has",
            event_id=row.event_id,
            dag_id=row.dag_id,
            run_id=row.run_id,
        )
        return
    condition = conditions.get(row.dag_id)
    if condition is None or event.uri not in ac.uris_of(condition):
        verdict.add(
            "WRONG_DAG",
            f"{name} consumed event {event.id} of {event.uri}, which its DAG's schedule does"
            " not name",
            event_id=event.id,
            uri=event.uri,
            dag_id=row.dag_id,
            run_id=row.run_id,
        )
    if (row.dag_id, row.run_id) not in asset_runs:
        verdict.add(
            "NO_RUN",
            f"event {event.id} is carried by {name}, which is no asset-triggered run",
            event_id=event.id,
            dag_id=row.dag_id,
            run_id=row.run_id,
        )


def _check_consumer(
    verdict: Verdict,
    dag_id: str,
    condition: Any,
    mine: Sequence[EventRow],
    carriers: Mapping[tuple[str, int], list[str]],
    paused: bool,
) -> list[EventRow]:
    """The per-consumer checks; returns its pending events (carried by no run, none after)."""
    carried_ids = [e.id for e in mine if carriers.get((dag_id, e.id))]
    # the newest event id that a run of this DAG carries: its queue was emptied then
    last_taken = max(carried_ids, default=0)
    for e in mine:
        runs = carriers.get((dag_id, e.id), [])
        if len(runs) > 1:
            verdict.add(
                "DUPLICATE_CONSUMER",
                f"event {e.id} of {e.uri} is carried by {len(runs)} runs of {dag_id}: {runs}",
                event_id=e.id,
                dag_id=dag_id,
                run_ids=sorted(runs),
            )
        if runs or e.id > last_taken:
            continue
        pushed_out = sum(1 for o in mine if o.uri == e.uri and e.id < o.id <= last_taken)
        if pushed_out >= MAX_EVENTS_KEPT:
            continue  # its bounded queue dropped it (newest MAX_EVENTS_KEPT per asset stay)
        verdict.add(
            "MISSING_CONSUMER",
            f"event {e.id} of {e.uri} was queued for {dag_id}, whose later run (carrying"
            f" event {last_taken}) did not carry it, nor did any other",
            event_id=e.id,
            dag_id=dag_id,
        )
    pending = [e for e in mine if e.id > last_taken]
    if pending and not paused and ac.satisfied(condition, frozenset(e.uri for e in pending)):
        ids = [e.id for e in pending]
        verdict.add(
            "MISSING_CONSUMER",
            f"{dag_id}'s pending events {ids} satisfy its condition, but no run carries them",
            event_ids=ids,
            dag_id=dag_id,
        )
    return pending


def _check_producers(
    verdict: Verdict, dags: Sequence[DagSpec], attempts: Sequence[Any], events: Sequence[EventRow]
) -> int:
    """One event per outlet of every successful attempt; none from an attempt that did not
    succeed. Returns the successes checked."""
    outlets: dict[tuple[str, str], tuple[str, ...]] = {}
    for spec in dags:
        for task in spec.tasks:
            if task.outlets:
                outlets[(spec.dag_id, task.task_id)] = tuple(dict.fromkeys(task.outlets))
    made: dict[tuple[str, str, str, int], list[EventRow]] = defaultdict(list)
    for e in events:
        if e.source[0]:
            made[e.source].append(e)
    successes = 0
    succeeded = set()
    for a in attempts:
        uris = outlets.get((a.dag_id, a.task_id.split("[", 1)[0]))
        if not uris or a.state != "success":
            continue
        source = (a.dag_id, a.run_id, a.task_id, a.try_number)
        succeeded.add(source)
        successes += 1
        name = f"{a.dag_id}/{a.run_id}/{a.task_id} try {a.try_number}"
        for uri in uris:
            n = sum(1 for e in made.get(source, ()) if e.uri == uri)
            if n != 1:
                verdict.add(
                    "OUTLET_MISSING" if n == 0 else "OUTLET_DUPLICATE",
                    f"{name} succeeded and made {n} events of its outlet {uri}",
                    source=list(source),
                    uri=uri,
                    events=n,
                )
    for source, evs in sorted(made.items()):
        if source not in succeeded:
            verdict.add(
                "PHANTOM_EVENT",
                f"events {[e.id for e in evs]} name the attempt {'/'.join(map(str, source))},"
                " which did not succeed",
                source=list(source),
                event_ids=[e.id for e in evs],
            )
    return successes


def _check_client_ids(verdict: Verdict, assets: AssetHistory) -> int:
    by_key: dict[str, list[EventRow]] = defaultdict(list)
    for e in assets.events:
        if e.key:
            by_key[e.key].append(e)
    for key, evs in sorted(by_key.items()):
        if len(evs) > 1:
            verdict.add(
                "DUPLICATE_EVENT",
                f"client event id {key!r} made {len(evs)} events {[e.id for e in evs]}",
                key=key,
                event_ids=[e.id for e in evs],
            )
    for rec in assets.posts:
        evs = by_key.get(rec.key, [])
        if rec.acked and not evs:
            verdict.add(
                "ACKED_EVENT_LOST",
                f"client event id {rec.key!r} was answered (event {rec.event_id}) but no"
                " event has it",
                key=rec.key,
                event_id=rec.event_id,
            )
        answered = {i for i, _ in rec.answers}
        if evs and answered - {evs[0].id}:
            verdict.add(
                "ACK_MISMATCH",
                f"client event id {rec.key!r} has event {evs[0].id}, the answers named"
                f" {sorted(answered)}",
                key=rec.key,
                answers=rec.answers,
            )
    if assets.posts:
        sends = sum(r.sends for r in assets.posts)
        retried = [r for r in assets.posts if r.errors]
        # the first answer after an error said duplicate: a failed send had committed
        landed = sum(1 for r in retried if r.answers and r.answers[0][1])
        verdict.notes.append(
            f"client: {len(assets.posts)} event ids, {sends} sends,"
            f" {len(retried)} ids sent again after an error ({landed} of them had committed),"
            f" {sum(1 for r in assets.posts if not r.acked)} never answered"
        )
    return len(by_key)
