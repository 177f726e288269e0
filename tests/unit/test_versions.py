"""Releases and the cluster version (core/versions.py, docs/architecture.md §12).

- The baseline (what the previous release, 0.2.0, can decode) is data; it is regenerated
  here from that release's source (git commit ed38e76, tests/old_release.py) and must be
  equal.
- Every class of the baseline keeps its fields in order, new ones only at the end with a
  default (an old node unpickles by position).
- The gate refuses what the baseline could not apply, and lets everything through once the
  cluster version is this release; a member of release 1 (older than the baseline) makes
  the node refuse everything (upgrade it to 0.2.0 first).
- Entries pickled by the baseline load here with the new fields at their defaults.
- The same log gives the same digests on the old core (a subprocess of the old release) and
  on this one, at cluster version 1 and 2, and snapshots cross in both directions until the
  cluster version is this release.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
from typing import Any

import pytest

import raftsched
from raftsched.cluster.versions import Finalizer, ReleaseMixin, hold_back_new_dags
from raftsched.core import commands as c
from raftsched.core import model as m
from raftsched.core import results as r
from raftsched.core import versions as vs
from raftsched.core import versions_baseline as baseline
from raftsched.core.state import SchedulerState
from raftsched.errors import ReleaseTooOld, SnapshotVersionError
from raftsched.raft.releases import ReleaseReports
from raftsched.raft.transport import RELEASE_KEY
from tests.old_release import OLD_COMMIT, OLD_VERSION, old_env, old_python
from tests.unit.test_digest_golden import _scenario_dags, _scenario_tasks
from tests.unit.test_state_harness import T0, at, dag, task

DESCRIBE = """
import dataclasses, enum, json, sys
import raftsched.core.commands as c, raftsched.core.model as m
classes, enums = {}, {}
for mod in (c, m):
    for name, obj in vars(mod).items():
        if not isinstance(obj, type) or obj.__module__ != mod.__name__:
            continue
        if dataclasses.is_dataclass(obj):
            classes[name] = [f.name for f in dataclasses.fields(obj)]
        elif issubclass(obj, enum.Enum):
            enums[name] = [e.value for e in obj]
json.dump({"classes": classes, "enums": enums}, sys.stdout)
"""

# The old core applies a pickled log and reports its digests, and restores snapshots.
REPLAY = """
import json, pickle, sys
from raftsched.core.state import SchedulerState
payload = pickle.load(sys.stdin.buffer)
state = SchedulerState()
digests = []
for cmd, i in payload["log"]:
    state.apply(cmd, log_index=i)
    digests.append(state.digest())
restored = SchedulerState.restore(payload["snapshot"]).digest()
try:
    SchedulerState.restore(payload["newer"])
    refused = ""
except Exception as err:
    refused = f"{type(err).__name__}: {err}"
out = {"digests": digests, "restored": restored, "refused": refused,
       "snapshot": state.snapshot(), "log": [(cmd, i) for cmd, i in payload["log"]]}
sys.stdout.buffer.write(pickle.dumps(out))
"""


def _old(script: str, stdin: bytes = b"") -> bytes:
    done = subprocess.run(
        [*old_python(), "-c", script],
        input=stdin,
        capture_output=True,
        env=old_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


def test_baseline_is_the_previous_release_as_its_source_says() -> None:
    old = json.loads(_old(DESCRIBE))
    assert {k: tuple(v) for k, v in old["classes"].items()} == baseline.CLASSES
    assert {k: tuple(v) for k, v in old["enums"].items()} == baseline.ENUMS


def test_version_is_in_one_place() -> None:
    assert vs.RELEASES[vs.RELEASE] == raftsched.__version__
    # each release describes the previous one: upgrades go one release at a time
    assert vs.BASELINE_RELEASE == vs.RELEASE - 1
    assert vs.RELEASES[vs.BASELINE_RELEASE] == OLD_VERSION == "0.2.0"
    assert OLD_COMMIT.startswith(baseline.BASELINE_COMMIT)
    assert vs.FIRST_RELEASE == 1 and vs.RELEASES[vs.FIRST_RELEASE] == "0.1.0"


def _current_dataclasses() -> dict[str, type]:
    return {
        name: obj
        for mod in (c, m)
        for name, obj in vars(mod).items()
        if isinstance(obj, type)
        and obj.__module__ == mod.__name__
        and dataclasses.is_dataclass(obj)
    }


def test_baseline_fields_keep_their_places_and_new_ones_have_defaults() -> None:
    current = _current_dataclasses()
    for name, old_fields in baseline.CLASSES.items():
        assert name in current, f"{name} of the baseline was removed: old entries name it"
        fields = dataclasses.fields(current[name])
        names = tuple(f.name for f in fields)
        assert names[: len(old_fields)] == old_fields, f"{name}: fields moved ({names})"
        for f in fields[len(old_fields) :]:
            has_default = f.default is not dataclasses.MISSING
            assert has_default or f.default_factory is not dataclasses.MISSING, (
                f"{name}.{f.name} is new and has no default: the baseline's entries lack it"
            )
    for name, values in baseline.ENUMS.items():
        now = {e.value for e in getattr(m, name)}
        assert set(values) <= now, f"{name} lost values of the baseline"


def test_every_frozen_command_class_fills_missing_fields_with_defaults() -> None:
    for name, cls in _current_dataclasses().items():
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        if params.frozen and hasattr(cls, "__slots__"):
            assert vs.tolerant(cls), f"{name} is not tolerant of entries of older releases"
    old_style = c.CompleteAttempt.__new__(c.CompleteAttempt)
    full = c.CompleteAttempt(
        request_id="r", now=T0, key=m.TaskKey("d", "r", "t"), token=3, success=True
    )
    state = full.__getstate__()  # type: ignore[attr-defined]
    old_style.__setstate__(state[: len(baseline.CLASSES["CompleteAttempt"])])  # type: ignore[attr-defined]
    assert old_style == full


def _spec() -> m.DagSpec:
    return dag("d", task("a"), task("b", "a"))


BASE = vs.BASELINE_RELEASE


def test_gate_lets_the_baselines_commands_through_and_refuses_what_is_new() -> None:
    register = c.RegisterDags(request_id="r1", now=T0, specs=(_spec(),))
    for version in (vs.FIRST_RELEASE, BASE):
        assert vs.refusal(register, version) is None
        assert vs.refusal(c.Batch(request_id="b", now=T0, commands=(register,)), version) is None

    bump = c.SetClusterVersion(request_id="v", now=T0, version=vs.RELEASE)
    assert vs.refusal(bump, BASE) is None  # the baseline has it; the node checks the members

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class PokeSensor(c.Command):  # a command class the baseline does not have
        sensor: str = ""

    poke = PokeSensor(request_id="p", now=T0)
    for version in (vs.FIRST_RELEASE, BASE):
        why = vs.refusal(c.Batch(request_id="b2", now=T0, commands=(register, poke)), version)
        assert why is not None and "PokeSensor" in why and "finish the upgrade" in why
        assert f"runs release {version}" in why and f"new in release {vs.RELEASE}" in why
    assert vs.refusal(poke, vs.RELEASE) is None

    new_fields = [
        (cls, f)
        for cls in (m.TaskSpec, m.DagSpec)
        for f in dataclasses.fields(cls)
        if f.name not in baseline.CLASSES[cls.__name__]
    ]
    for cls, f in new_fields:  # a field of a later release: refused at a non-default value
        value = {str: "x", bool: True, int: 7}.get(type(f.default), "x")
        spec = _spec()
        if cls is m.TaskSpec:
            spec = dataclasses.replace(
                spec, tasks=(dataclasses.replace(spec.tasks[0], **{f.name: value}),)
            )
        else:
            spec = dataclasses.replace(spec, **{f.name: value})
        why = vs.refusal(c.RegisterDags(request_id="r2", now=T0, specs=(spec,)), BASE)
        assert why is not None and f.name in why, (cls.__name__, f.name)

    new_rules = [r for r in m.TriggerRule if r.value not in baseline.ENUMS["TriggerRule"]]
    for rule in new_rules:
        spec = _spec()
        tasks = (spec.tasks[0], dataclasses.replace(spec.tasks[1], trigger_rule=rule))
        why = vs.refusal(
            c.RegisterDags(
                request_id="r3", now=T0, specs=(dataclasses.replace(spec, tasks=tasks),)
            ),
            BASE,
        )
        assert why is not None and rule.name in why
    sensor = dataclasses.replace(_spec().tasks[0], kind="sensor")
    assert "kind" in (vs.refusal(sensor, BASE) or "")
    assert vs.refusal(sensor, vs.RELEASE) is None


def test_gate_knows_the_baselines_vocabularies() -> None:
    # release 2's vocabularies, as its validation knew them (git show ed38e76:...)
    assert vs.BASELINE_VALUES[("TaskSpec", "kind")] == {"bash", "python"}
    assert vs.BASELINE_VALUES[("SetSecret", "kind")] == {"variable", "connection"}
    assert vs.BASELINE_VALUES[("LogChunk", "stream")] == {"stdout", "stderr"}
    task = _spec().tasks[0]
    known = dataclasses.replace(
        task, callbacks=(("failure", "notify", "{}"), ("retry", "raftsched:webhook", "{}"))
    )
    assert vs.refusal(known, BASE) is None
    for triple, named in [
        (("skipped", "notify", "{}"), "event = 'skipped'"),
        (("failure", "raftsched:slack", "{}"), "callable = 'raftsched:slack'"),
    ]:
        newer = dataclasses.replace(task, callbacks=(triple,))
        assert named in (vs.refusal(newer, BASE) or ""), triple
        assert vs.refusal(newer, vs.RELEASE) is None
    spec = dataclasses.replace(_spec(), callbacks=(("retry", "notify", "{}"),))  # a task event
    assert "event = 'retry'" in (vs.refusal(spec, BASE) or "")
    chunk = c.LogChunk(stream="stdin", text="x")
    assert "stream" in (vs.refusal(chunk, BASE) or "")


def test_cluster_version_is_in_digest_and_snapshot_only_once_raised() -> None:
    """Past FIRST_RELEASE (1), not past the baseline: a node of 0.2.0 at cluster version 2
    and this one must digest and snapshot alike."""
    state = SchedulerState()
    assert state.cluster_version == vs.FIRST_RELEASE
    state.apply(c.RegisterDags(request_id="r", now=T0, specs=(_spec(),)), log_index=1)
    before = state.snapshot()
    assert "cluster_version" not in before and before["schema_version"] == 2
    digest = state.digest()
    assert state.apply(c.SetClusterVersion(request_id="v", now=at(1), version=BASE), log_index=2).ok
    assert state.cluster_version == BASE and state.digest() != digest
    at_baseline = state.snapshot()
    assert at_baseline["cluster_version"] == BASE
    assert at_baseline["schema_version"] == vs.SNAPSHOT_SCHEMA_VERSION
    assert state.apply(c.SetClusterVersion(request_id="w", now=at(2), version=1), log_index=3).ok
    assert state.cluster_version == BASE  # never lowered
    assert state.apply(
        c.SetClusterVersion(request_id="x", now=at(3), version=vs.RELEASE), log_index=4
    ).ok
    after = state.snapshot()
    assert after["schema_version"] == vs.SNAPSHOT_SCHEMA_VERSION
    restored = SchedulerState.restore(json.loads(json.dumps(after)))
    assert restored.cluster_version == vs.RELEASE and restored.digest() == state.digest()
    assert restored.recompute_digest() == state.digest()
    too_new = dict(after, cluster_version=vs.RELEASE + 1)
    with pytest.raises(ReleaseTooOld):
        SchedulerState.restore(too_new)
    with pytest.raises(SnapshotVersionError):
        SchedulerState.restore(dict(after, schema_version=vs.SNAPSHOT_SCHEMA_VERSION + 1))


@pytest.mark.parametrize("scenario", [_scenario_tasks, _scenario_dags])
def test_old_and_new_cores_agree_on_the_same_log_and_each_others_snapshots(scenario) -> None:  # type: ignore[no-untyped-def]
    _steps, sim = scenario()
    log = list(sim.log)
    for cmd, _ in log:  # the scenarios use only what the baseline knows
        assert vs.refusal(cmd, BASE) is None, cmd
    # a cluster of 0.2.0 nodes finalizes at 2 (its release): the mixed cluster runs there
    last = max(i for _, i in log)
    log.append((c.SetClusterVersion(request_id="v2", now=at(98), version=BASE), last + 1))
    ours = SchedulerState()
    digests = []
    for cmd, i in log:
        ours.apply(cmd, log_index=i)
        digests.append(ours.digest())
    assert ours.cluster_version == BASE
    newer = SchedulerState.restore(ours.snapshot())
    newer.apply(
        c.SetClusterVersion(request_id="v", now=at(99), version=vs.RELEASE), log_index=10_000
    )
    payload = {"log": log, "snapshot": ours.snapshot(), "newer": newer.snapshot()}
    old = pickle.loads(_old(REPLAY, pickle.dumps(payload)))
    assert old["digests"] == digests  # same log, same digests: a mixed cluster agrees
    assert old["restored"] == ours.digest()  # our snapshot (cluster version 2), read by 0.2.0
    assert "ReleaseTooOld" in old["refused"]  # a finalized snapshot is refused
    assert SchedulerState.restore(old["snapshot"]).digest() == ours.digest()  # and back
    # entries pickled by the baseline (its classes, its field lists) apply here alike
    again = SchedulerState()
    for cmd, i in old["log"]:
        again.apply(cmd, log_index=i)
    assert again.digest() == ours.digest()


class _Peer:
    def __init__(self, address: str) -> None:
        self.address = self.id = address


class _FakeNode(ReleaseMixin, ReleaseReports):
    """What ReleaseMixin and ReleaseReports use of a SchedulerNode."""

    def __init__(self, cluster_version: int = vs.BASELINE_RELEASE) -> None:
        self._init_releases()
        self.settings = type("S", (), {"self_address": "a:1"})()
        self.state = SchedulerState()
        self.state.cluster_version = cluster_version

    def read(self, fn: Any) -> Any:
        return fn(self.state)

    def peers(self) -> dict[str, bool]:
        return {"b:1": True, "c:1": True}

    @property
    def raft(self) -> _FakeNode:  # the Raft node's reports live on the same object here
        return self


def test_node_gate_and_finalization_follow_the_members_releases() -> None:
    node = _FakeNode()  # a cluster of 0.2.0 nodes, finalized at 2, being upgraded
    bump = c.SetClusterVersion(request_id="v", now=T0, version=vs.RELEASE)
    assert node.member_releases() == {"a:1": vs.RELEASE, "b:1": None, "c:1": None}
    assert "not every member" in (node.release_refusal(bump) or "")
    node._note_release(_Peer("b:1"), {"type": "next_node_idx", RELEASE_KEY: BASE})
    node._note_release(_Peer("c:1"), {"type": "next_node_idx", RELEASE_KEY: vs.RELEASE})
    assert node.member_releases() == {"a:1": vs.RELEASE, "b:1": BASE, "c:1": vs.RELEASE}
    assert f"b:1: {BASE}" in (node.release_refusal(bump) or "")
    register = c.RegisterDags(request_id="r", now=T0, specs=(_spec(),))
    assert node.release_refusal(register) is None  # what 0.2.0 knows goes through
    proposed: list[Any] = []
    proposer = type(
        "P",
        (),
        {
            "make": staticmethod(lambda cls, **kw: cls(request_id="x", now=T0, **kw)),
            "propose": staticmethod(lambda cmd: proposed.append(cmd) or r.Result(True)),
        },
    )()
    assert not Finalizer(node, proposer).maybe_finalize() and not proposed
    node._note_release(_Peer("b:1"), {"type": "next_node_idx", RELEASE_KEY: vs.RELEASE})
    assert node.release_refusal(bump) is None
    assert Finalizer(node, proposer).maybe_finalize()
    assert proposed == [c.SetClusterVersion(request_id="x", now=T0, version=vs.RELEASE)]
    too_new = c.SetClusterVersion(request_id="n", now=T0, version=vs.RELEASE + 1)
    assert "newer" in (node.release_refusal(too_new) or "")
    assert "cannot be rolled back" in (node.too_old_for(too_new) or "")
    assert node.too_old_for(bump) is None


def test_a_member_older_than_the_baseline_stops_every_proposal(caplog) -> None:  # type: ignore[no-untyped-def]
    """A cluster still at release 1 (0.1.0 nodes): this release does not describe it, so it
    proposes nothing while it hears from such a node: upgrade every node to 0.2.0 first."""
    node = _FakeNode(vs.FIRST_RELEASE)
    register = c.RegisterDags(request_id="r", now=T0, specs=(_spec(),))
    assert node.release_refusal(register) is None  # a fresh cluster: the baseline's gate
    node._note_release(_Peer("b:1"), {"type": "keepalive"})  # sent without a release: no report
    assert node.member_releases()["b:1"] is None and node.release_refusal(register) is None
    node._note_release(_Peer("b:1"), {"type": "next_node_idx"})  # 0.1.0 sends no release
    node._note_release(_Peer("c:1"), {"type": "next_node_idx", RELEASE_KEY: vs.RELEASE})
    assert node.older_than_baseline() == {"b:1": 1}
    why = node.release_refusal(register) or ""
    assert "b:1: release 1 (0.1.0)" in why and "upgrade every node to 0.2.0 first" in why
    assert "upgrade every node to 0.2.0 first" in caplog.text  # logged once, as an error
    bump = c.SetClusterVersion(request_id="v", now=T0, version=vs.RELEASE)
    assert "0.2.0 first" in (node.release_refusal(bump) or "")
    proposed: list[Any] = []
    proposer = type(
        "P",
        (),
        {
            "make": staticmethod(lambda cls, **kw: cls(request_id="x", now=T0, **kw)),
            "propose": staticmethod(lambda cmd: proposed.append(cmd) or r.Result(True)),
        },
    )()
    assert not Finalizer(node, proposer).maybe_finalize() and not proposed
    # once the cluster runs the baseline, a (stray) report of release 1 changes nothing
    assert _FakeNode().release_refusal(register) is None
    later = _FakeNode()
    later._note_release(_Peer("b:1"), {"type": "next_node_idx"})
    assert later.release_refusal(register) is None


def test_a_parsed_dag_the_cluster_cannot_take_yet_becomes_an_import_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fine = _spec()
    rules = [x for x in m.TriggerRule if x.value not in baseline.ENUMS["TriggerRule"]]
    if not rules:  # none is new in this release: the baseline as if it lacked one
        rules = [m.TriggerRule.NONE_SKIPPED]
        known = tuple(v for v in baseline.ENUMS["TriggerRule"] if v != rules[0].value)
        monkeypatch.setitem(baseline.ENUMS, "TriggerRule", known)
    newer = dataclasses.replace(
        dag("n", task("a"), task("b", "a")),
        fileloc="/dags/new.py",
    )
    newer = dataclasses.replace(
        newer, tasks=(newer.tasks[0], dataclasses.replace(newer.tasks[1], trigger_rule=rules[0]))
    )
    node = _FakeNode()
    specs, errors = hold_back_new_dags(node, [fine, newer], [])
    assert specs == [fine]
    assert [e.fileloc for e in errors] == ["/dags/new.py"]
    assert "finish the upgrade" in errors[0].message and "'n'" in errors[0].message
    assert hold_back_new_dags(_FakeNode(vs.RELEASE), [fine, newer], []) == ([fine, newer], [])
