"""Variables and connections: the core's commands, encryption and rotation, connection URIs,
masking of task output, the task-side API and the worker's resolution of declared names."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from cryptography.fernet import Fernet

from raftsched import DAG, BashTask, PythonTask, masking
from raftsched import secrets as sx
from raftsched.core import commands as c
from raftsched.core import handlers_secrets as hs
from raftsched.core import limits
from raftsched.core import results as r
from raftsched.core.model import TaskKey
from raftsched.core.state import SchedulerState
from raftsched.errors import (
    DagDefinitionError,
    RaftschedError,
    SecretDecryptError,
    SecretsNotConfigured,
    SnapshotVersionError,
)
from raftsched.worker.task_secrets import masked_values, with_secrets
from raftsched.worker.transport import Assignment
from tests.unit.test_state_harness import Sim, at, dag, task

KEY1 = Fernet.generate_key().decode()
KEY2 = Fernet.generate_key().decode()


def _set(sim: Sim, key: str, value: str, kind: str = "variable", **kw: Any) -> r.Result:
    box = sx.SecretBox([KEY1])
    return sim.apply(
        c.SetSecret(
            request_id=sim.rid(), now=at(1), kind=kind, key=key, ciphertext=box.encrypt(value), **kw
        )
    )


# -- the core -------------------------------------------------------------------------------


def test_set_replace_delete_keep_digest_and_snapshot_in_step() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    before = sim.state.snapshot()
    assert "secrets" not in before and before["schema_version"] == 2  # nothing new when empty
    assert _set(sim, "API_TOKEN", "hunter22").ok
    assert _set(sim, "db", "postgresql://u:pw@h/x", kind="connection").ok
    assert _set(sim, "API_TOKEN", "hunter23").ok  # replaced
    assert sim.state.digest() == sim.state.recompute_digest()
    assert set(sim.state.secret_records("variable")) == {"API_TOKEN"}
    assert set(sim.state.secret_records("connection")) == {"db"}
    snap = sim.state.snapshot()
    assert snap["schema_version"] == 3 and len(snap["secrets"]) == 2
    text = json.dumps(snap)
    assert "hunter2" not in text and "pw@" not in text  # ciphertext only
    restored = SchedulerState.restore(json.loads(text))
    assert restored.digest() == sim.state.digest()
    assert pickle.loads(pickle.dumps(sim.state)).digest() == sim.state.digest()
    gone = sim.apply(c.DeleteSecret(request_id=sim.rid(), now=at(2), kind="variable", key="nope"))
    assert not gone.ok and gone.reason == hs.UNKNOWN_SECRET
    for kind, key in (("variable", "API_TOKEN"), ("connection", "db")):
        assert sim.apply(c.DeleteSecret(request_id=sim.rid(), now=at(2), kind=kind, key=key)).ok
    assert sim.state.digest() == sim.state.recompute_digest()
    assert "secrets" not in sim.state.snapshot()


def test_a_snapshot_with_secrets_is_refused_by_a_release_that_only_knows_version_2() -> None:
    sim = Sim()
    _set(sim, "X_1", "value")
    snap = sim.state.snapshot()
    snap.pop("secrets")  # a version 3 without the table is not one this release wrote
    with pytest.raises(SnapshotVersionError):
        SchedulerState.restore(snap)


def test_compare_and_set_keeps_a_value_changed_since_it_was_read() -> None:
    sim = Sim()
    _set(sim, "V", "one1")
    old = sim.state.secret_records("variable")["V"].ciphertext
    _set(sim, "V", "two2")
    box = sx.SecretBox([KEY2, KEY1])
    stale = c.SetSecret(
        request_id=sim.rid(),
        now=at(3),
        kind="variable",
        key="V",
        ciphertext=box.rotate(old),
        expected=old,
    )
    res = sim.apply(stale)
    assert not res.ok and res.reason == r.STATE_CHANGED
    assert box.decrypt(sim.state.secret_records("variable")["V"].ciphertext) == "two2"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"ciphertext": "hunter22"}, "ciphertext"),  # clear text never enters the log
        ({"key": "../etc/passwd"}, "key"),
        ({"key": "a b"}, "key"),
        ({"key": "1abc"}, "key"),
        ({"key": "x" * (limits.MAX_SECRET_KEY_CHARS + 1)}, "key"),
        ({"key": "a\x00b"}, "key"),
        ({"key": ""}, "key"),
        ({"key": 7}, "key"),
        ({"kind": "password"}, "kind"),
        ({"description": "d" * (limits.MAX_SECRET_DESCRIPTION_CHARS + 1)}, "description"),
        ({"ciphertext": "gAAAAA" + "A" * limits.MAX_SECRET_CIPHERTEXT_CHARS}, "ciphertext"),
        ({"expected": "plain"}, "expected"),
    ],
)
def test_hostile_or_oversize_input_is_refused_and_changes_nothing(
    fields: dict[str, Any], field: str
) -> None:
    sim = Sim()
    digest = sim.state.digest()
    values: dict[str, Any] = {
        "kind": "variable",
        "key": "OK",
        "ciphertext": sx.SecretBox([KEY1]).encrypt("v"),
    }
    values.update(fields)
    res = sim.apply(c.SetSecret(request_id=sim.rid(), now=at(1), **values))
    assert not res.ok and res.reason == r.INVALID and field in str(res.value)
    assert sim.state.digest() != digest  # the applied index moved on...
    assert sim.state.secret_records("variable") == {}  # ...but nothing else
    assert sim.state.digest() == sim.state.recompute_digest()


def test_the_number_of_entries_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_SECRETS", 2)
    sim = Sim()
    assert _set(sim, "A", "aaaa").ok and _set(sim, "B", "bbbb").ok
    res = _set(sim, "C", "cccc")
    assert not res.ok and res.reason == hs.TOO_MANY_SECRETS
    assert _set(sim, "A", "again").ok  # replacing is always allowed


# -- encryption and rotation ----------------------------------------------------------------


def test_no_key_is_refused_with_how_to_make_one() -> None:
    with pytest.raises(SecretsNotConfigured) as err:
        sx.SecretBox([])
    assert "[secrets] fernet_key" in str(err.value) and "Fernet.generate_key()" in str(err.value)
    assert sx.box_from_config(("",)) is None
    with pytest.raises(RaftschedError, match="32 url-safe base64"):
        sx.SecretBox(["not-a-key"])


def test_rotation_encrypts_with_the_first_key_and_decrypts_with_any() -> None:
    old = sx.SecretBox([KEY1])
    token = old.encrypt("s3cret value")
    assert "s3cret" not in token and token.startswith("gAAAAA")
    both = sx.SecretBox([KEY2, KEY1])
    assert both.decrypt(token) == "s3cret value"
    assert not both.encrypted_with_first(token)
    rotated = both.rotate(token)
    assert both.encrypted_with_first(rotated)
    assert sx.SecretBox([KEY2]).decrypt(rotated) == "s3cret value"
    with pytest.raises(SecretDecryptError, match="secrets rotate"):
        sx.SecretBox([KEY2]).decrypt(token)
    assert KEY1 not in repr(both)


# -- connections ----------------------------------------------------------------------------


def test_a_connection_uri_in_parts_and_masked() -> None:
    uri = "postgresql://bob:p%40ss@db.example:5432/app?sslmode=require"
    conn = sx.parse_connection(uri, "wh")
    assert (conn.conn_type, conn.host, conn.port, conn.login, conn.password) == (
        "postgresql",
        "db.example",
        5432,
        "bob",
        "p@ss",
    )
    assert (conn.schema, conn.extra) == ("app", "sslmode=require")
    assert sx.masked_uri(uri) == "postgresql://bob:***@db.example:5432/app?sslmode=require"
    assert "p@ss" not in repr(conn) and "p%40ss" not in str(conn)
    assert set(sx.mask_values("connection", uri)) == {uri, "p@ss", "p%40ss"}
    with pytest.raises(ValueError, match="not a URI"):
        sx.parse_connection("just words", "x")


@pytest.mark.parametrize(
    ("uri", "masked", "parts"),
    [
        (  # a webhook: every path segment after the first
            "https://hooks.slack.com/services/T0AB/B0CD/XyZsecret9",
            "https://hooks.slack.com/services/***",
            {"T0AB/B0CD/XyZsecret9", "T0AB", "B0CD", "XyZsecret9"},
        ),
        (  # query values (the connection's extra), a flag excepted; a bare item whole
            "https://api.example.com/v1?api_key=k%2By+z&verbose=true&tokenonly",
            "https://api.example.com/v1?api_key=***&verbose=true&***",
            {"k%2By+z", "k+y+z", "k+y z", "tokenonly"},
        ),
        (  # extra that holds a password; the fragment
            "smtp://mail.example:587?password=hunter22&starttls=true#frag-secret",
            "smtp://mail.example:587?password=***&starttls=true#***",
            {"hunter22", "frag-secret"},
        ),
        (  # a database name is not a credential; a file path past its first segment is
            "sqlite:////var/lib/app.db",
            "sqlite:////var/***",
            {"lib/app.db", "app.db"},
        ),
        ("mysql://ann@db/app", "mysql://ann@db/app", set()),
    ],
)
def test_each_credential_part_of_a_connection_is_masked(
    uri: str, masked: str, parts: set[str]
) -> None:
    assert sx.masked_uri(uri) == masked
    conn = sx.masked_connection(uri, "c")
    assert conn.uri == masked and f"{masked}" in repr(conn)
    values = set(sx.mask_values("connection", uri))
    assert parts <= values and uri in values
    log = f"calling {uri} with {' '.join(sorted(parts))} done"
    assert (
        sx.mask_text(log, values)
        == "calling *** with "
        + " ".join("***" if len(p) >= sx.MIN_MASKED_CHARS else p for p in sorted(parts))
        + " done"
    )


def test_an_operator_sees_the_shape_of_a_connection() -> None:
    uri = "https://bot:p%40ss@hooks.example:8443/services/T0/B0/XXXX?api_key=abc123&ssl=on"
    conn = sx.masked_connection(uri, "hook")
    assert (conn.conn_type, conn.host, conn.port, conn.login) == (
        "https",
        "hooks.example",
        8443,
        "bot",
    )
    assert (conn.password, conn.schema, conn.extra) == ("***", "services/***", "api_key=***&ssl=on")
    assert conn.uri == "https://bot:***@hooks.example:8443/services/***?api_key=***&ssl=on"
    shown = repr(conn) + conn.schema + conn.extra + conn.uri
    for secret in ("p@ss", "p%40ss", "XXXX", "abc123", "T0/B0"):
        assert secret not in shown
    plain = sx.parse_connection(uri, "hook")  # what the task (and an admin's reveal) gets
    assert (plain.password, plain.schema, plain.extra) == (
        "p@ss",
        "services/T0/B0/XXXX",
        "api_key=abc123&ssl=on",
    )


# -- masking --------------------------------------------------------------------------------


def test_values_are_masked_even_when_split_between_reads() -> None:
    masker = sx.StreamMasker(["hunter22", "abc"])  # "abc" is too short to mask
    pieces = ["pass=hun", "ter22 and abc\n", "again hunter2", "2 end"]
    out = "".join(masker.feed(p) for p in pieces) + masker.flush()
    assert out == "pass=*** and abc\nagain *** end"
    assert masker.feed("line done\n") == "line done\n"  # a whole line goes out at once


def test_a_value_containing_another_is_masked_whole() -> None:
    assert sx.mask_text("x=longsecret", ["secret", "longsecret"]) == "x=***"


def test_a_return_value_is_masked_inside_its_json() -> None:
    values = ["hunter22", 's3cr"et', "482913", "abc"]
    text = json.dumps(
        {
            "token": "hunter22",
            "url": "https://x/?t=hunter22&u=1",
            "quoted": 's3cr"et',
            "hunter22": [1, 482913, 4829130, True, None, "abc"],
        },
        separators=(",", ":"),
    )
    out = masking.mask_json(text, values)
    assert json.loads(out) == {
        "token": "***",
        "url": "https://x/?t=***&u=1",
        "quoted": "***",
        "***": [1, "***", "***", True, None, "abc"],  # numbers holding one, as text
    }
    escaped = '["\\u0068unter22"]'  # a task may escape what it writes
    assert json.loads(masking.mask_json(escaped, values)) == ["***"]
    unchanged = '{"n": 1.50, "s": "plain"}'
    assert masking.mask_json(unchanged, values) is unchanged  # the same text, not re-encoded
    assert masking.mask_json('"hunter22"', []) == '"hunter22"'
    assert masking.mask_json("", values) == ""


# -- the task's side ------------------------------------------------------------------------


def test_the_task_api_reads_what_the_worker_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTSCHED_VAR_API", "tok")
    monkeypatch.setenv("RAFTSCHED_CONN_wh", "mysql://u:p@h:3306/d")
    assert sx.get_variable("API") == "tok"
    assert sx.get_variable("NOPE", default="d") == "d"
    with pytest.raises(KeyError, match="secrets="):
        sx.get_variable("NOPE")
    assert sx.get_connection("wh").port == 3306
    with pytest.raises(KeyError, match="connections add"):
        sx.get_connection("other")


def test_tasks_declare_names_only_in_their_spec() -> None:
    with DAG("sd", schedule=None) as d:
        BashTask("b", command="echo", secrets=["API"], connections=["wh"])
        PythonTask("p", fn=_fn, secrets="API")
        BashTask("plain", command="echo")
    spec = d.to_spec()
    assert spec.task("b").env == ((sx.DECLARATION_ENV, "var:API,conn:wh"),)
    assert spec.task("p").env == ((sx.DECLARATION_ENV, "var:API"),)
    assert spec.task("plain").env == ()  # unchanged: same spec hash as before
    with DAG("bad", schedule=None), pytest.raises(DagDefinitionError, match="letter or _"):
        BashTask("t", command="echo", secrets=["no-dashes"])
    with DAG("bad2", schedule=None), pytest.raises(DagDefinitionError, match="reserved"):
        BashTask("t", command="echo", env={sx.DECLARATION_ENV: "x"}, secrets=["A"])


def _fn() -> None:
    pass


class _Transport:
    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def resolve_secrets(self, key: TaskKey, token: int, worker_id: str, v: Any, cn: Any) -> Any:
        self.asked.append((token, worker_id, list(v), list(cn)))
        return {("variable", n): f"cluster-{n}" for n in v} | {
            ("connection", n): f"pg://u:pw-{n}@h/d" for n in cn
        }


def test_the_worker_asks_its_own_backend_first_then_the_cluster() -> None:
    a = Assignment(
        key=TaskKey("d", "r", "t"),
        token=7,
        try_number=1,
        kind="bash",
        env=((sx.DECLARATION_ENV, "var:LOCAL,var:REMOTE,conn:wh"),),
    )
    transport = _Transport()
    backend = sx.EnvSecretsBackend({"RAFTSCHED_SECRET_VAR_LOCAL": "from-env"})
    got = with_secrets(transport, "w1", a, backends=[backend])
    assert dict(got.secret_env) == {
        "RAFTSCHED_VAR_LOCAL": "from-env",
        "RAFTSCHED_VAR_REMOTE": "cluster-REMOTE",
        "RAFTSCHED_CONN_wh": "pg://u:pw-wh@h/d",
    }
    assert transport.asked == [(7, "w1", ["REMOTE"], ["wh"])]
    assert "from-env" not in repr(got) and "cluster-REMOTE" not in repr(got)
    assert set(masked_values(got)) >= {"from-env", "cluster-REMOTE", "pw-wh"}
    plain = Assignment(key=TaskKey("d", "r", "t"), token=7, try_number=1, kind="bash")
    assert with_secrets(object(), "w1", plain) is plain  # nothing declared: nothing asked
    with pytest.raises(RaftschedError, match="cannot fetch"):
        with_secrets(object(), "w1", a, backends=[])


def test_a_rotation_plan_applies_as_compare_and_set_and_keeps_newer_values() -> None:
    sim = Sim()
    _set(sim, "A", "alpha-value")  # under KEY1
    _set(sim, "db", "pg://u:pw-db@h/x", kind="connection")
    records = [
        (kind, key, rec.ciphertext, rec.description)
        for kind in sx.KINDS
        for key, rec in sim.state.secret_records(kind).items()
    ]
    new_box = sx.SecretBox([KEY2, KEY1])
    plan = sx.rotation_plan(new_box, records)
    assert {(kind, key) for kind, key, *_ in plan} == {("variable", "A"), ("connection", "db")}
    _set(sim, "A", "changed-meanwhile")  # set by a node still encrypting with KEY1
    results = [
        sim.apply(
            c.SetSecret(
                request_id=sim.rid(),
                now=at(5),
                kind=kind,
                key=key,
                ciphertext=new,
                description=desc,
                expected=old,
            )
        )
        for kind, key, new, desc, old in plan
    ]
    assert sorted(res.ok for res in results) == [False, True]
    only_new = sx.SecretBox([KEY2])
    db = sim.state.secret_records("connection")["db"].ciphertext
    assert only_new.decrypt(db) == "pg://u:pw-db@h/x"
    a = sim.state.secret_records("variable")["A"].ciphertext
    assert new_box.decrypt(a) == "changed-meanwhile"  # kept; a second rotate picks it up
    assert [key for _, key, *_ in sx.rotation_plan(new_box, [("variable", "A", a, "")])] == ["A"]
