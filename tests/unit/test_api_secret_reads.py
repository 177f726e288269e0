"""SecretService and DAG restrictions, through the servicer over one state (the stand-ins of
test_api_bounds): an on-demand ResolveSecrets is committed (ReadSecrets) before anything is
decrypted and answers the node's refusal as a status; a declared name restricted to another
DAG is refused too (a declaration must not bypass the restriction); SetSecret compares and
keeps the DAGs, list and get show them, and a key rotation keeps them."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from cryptography.fernet import Fernet
from sqlalchemy.engine import Engine
from test_api_bounds import Aborted, Context, Node, Proposer
from test_state_harness import Sim, dag, task

from raftsched import secrets as sx
from raftsched.api.gen import common_pb2, secret_pb2
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.secrets import SecretServicer
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core import secret_reads as sr
from raftsched.core.versions import RELEASE

OLD_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()
DECLARES_TEAM = ((sx.DECLARATION_ENV, sx.encode_declaration(["TEAM"], [])),)


class Secrets:
    def __init__(self, engine: Engine) -> None:
        self.sim = Sim()
        self.sim.register(dag("d", task("t")), dag("e", task("u", env=DECLARES_TEAM)))
        now = datetime.now(UTC)
        self.sim.apply(c.SetClusterVersion(request_id="v", now=now, version=RELEASE))
        self.node = Node(self.sim)
        self.proposer = Proposer(self.node)
        api = SimpleNamespace(max_conf_bytes=65536, tls_cert=None, tls_ca=None)
        self.ctx = ApiContext(
            node=self.node,  # type: ignore[arg-type]
            proposer=self.proposer,  # type: ignore[arg-type]
            api=api,  # type: ignore[arg-type]
            engine=engine,
            default_lease_ttl=30.0,
        )
        self.service = SecretServicer(self.ctx, [OLD_KEY])

    def call(self, method: str, request: Any) -> tuple[Any, Aborted | None]:
        try:
            return getattr(self.service, method)(request, Context()), None
        except Aborted as err:
            return None, err

    def set(self, key: str, value: str, dags: tuple[str, ...] = (), kind: str = "variable") -> Any:
        answer, err = self.call(
            "SetSecret", secret_pb2.SetSecretRequest(kind=kind, key=key, value=value, dags=dags)
        )
        assert err is None, err
        return answer

    def lease(self, dag_id: str) -> Any:
        assert self.sim.create(dag_id, now=datetime.now(UTC)).ok
        (grant,) = self.sim.lease(now=datetime.now(UTC))
        return grant.lease

    def resolve(self, lease: Any, names: list[str], **kw: Any) -> tuple[Any, Aborted | None]:
        k = lease.key
        request = secret_pb2.ResolveSecretsRequest(
            key=common_pb2.TaskKey(dag_id=k.dag_id, run_id=k.run_id, task_id=k.task_id),
            token=kw.pop("token", lease.token),
            worker_id="w1",
            variables=names,
            **kw,
        )
        return self.call("ResolveSecrets", request)


@pytest.fixture
def api(db_engine: Engine) -> Secrets:
    return Secrets(db_engine)


def test_an_on_demand_read_is_committed_then_decrypted(api: Secrets) -> None:
    api.set("OPEN", "open-value")
    api.set("TEAM", "team-value", ("e",))
    lease = api.lease("d")
    answer, err = api.resolve(lease, ["OPEN"], on_demand=True)
    assert err is None and [(v.key, v.value) for v in answer.values] == [("OPEN", "open-value")]
    reads = [p for p in api.proposer.proposed if isinstance(p, sr.ReadSecrets)]
    assert [(p.key, p.token, p.names) for p in reads] == [(lease.key, lease.token, ("OPEN",))]
    assert [(a.action, a.dag_id) for a in api.sim.state.audit if "read" in a.action] == [
        ("read_variable", "d")
    ]
    _, err = api.resolve(lease, ["TEAM"], on_demand=True)
    assert err is not None and err.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.details == "variable TEAM is restricted to DAGs e: DAG d may not read it"
    _, err = api.resolve(lease, ["MISSING"], on_demand=True)
    assert err is not None and err.code == grpc.StatusCode.NOT_FOUND
    # without on_demand an undeclared name stays refused, as before
    _, err = api.resolve(lease, ["OPEN"])
    assert err is not None and err.code == grpc.StatusCode.PERMISSION_DENIED
    assert "does not declare" in err.details
    _, err = api.resolve(lease, ["OPEN"], on_demand=True, token=lease.token + 99)
    assert err is not None and err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert len([a for a in api.sim.state.audit if "read" in a.action]) == 1


def test_a_declared_name_is_refused_to_a_dag_it_is_restricted_away_from(api: Secrets) -> None:
    api.set("TEAM", "team-value", ("d",))
    lease = api.lease("e")  # e's task declares TEAM
    _, err = api.resolve(lease, ["TEAM"])
    assert err is not None and err.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.details == "variable TEAM is restricted to DAGs d: DAG e may not read it"
    api.set("TEAM", "team-value", ("d", "e"))
    answer, err = api.resolve(lease, ["TEAM"])
    assert err is None and answer.values[0].value == "team-value"


def test_set_compares_the_dags_list_shows_them_and_rotation_keeps_them(api: Secrets) -> None:
    assert api.set("TEAM", "v-1234", ("e", "d", "d")).changed
    assert not api.set("TEAM", "v-1234", ("d", "e")).changed  # the same list, normalized
    assert api.set("TEAM", "v-1234", ("d",)).changed
    listed, _ = api.call("ListSecrets", secret_pb2.ListSecretsRequest(kind="variable"))
    assert [(s.key, list(s.dags)) for s in listed.secrets] == [("TEAM", ["d"])]
    got, _ = api.call("GetSecret", secret_pb2.GetSecretRequest(kind="variable", key="TEAM"))
    assert list(got.dags) == ["d"]
    _, err = api.call(
        "SetSecret",
        secret_pb2.SetSecretRequest(
            kind="variable", key="X", value="v", dags=[f"d{i}" for i in range(51)]
        ),
    )
    assert err is not None and err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "dags" in err.details
    api.service = SecretServicer(api.ctx, [NEW_KEY, OLD_KEY])
    rotated, err = api.call("RotateSecrets", secret_pb2.RotateSecretsRequest())
    assert err is None and rotated.rotated == 1
    record = api.sim.state.secrets.get(("variable", "TEAM"))
    assert record.dags == ("d",)
    assert Fernet(NEW_KEY.encode()).decrypt(record.ciphertext.encode()) == b"v-1234"


def test_a_full_outbox_is_resource_exhausted(api: Secrets) -> None:
    api.set("OPEN", "open-value")
    lease = api.lease("d")
    api.proposer.answer = r.Result(False, r.OUTBOX_FULL, 200_000)
    _, err = api.resolve(lease, ["OPEN"], on_demand=True)
    assert err is not None and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "try the read again later" in err.details
