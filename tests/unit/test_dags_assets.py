"""Assets in DAG files (§21): Asset/Dataset, outlets and inlets, schedule=[a, b], a | b,
a & b, nested, in the native API and under Airflow's names; bad URIs are import errors."""

from __future__ import annotations

import json

import pytest

from raftsched.airflow import DAG as AirflowDAG
from raftsched.airflow.datasets import Dataset as AirflowDataset
from raftsched.airflow.decorators import task as af_task
from raftsched.airflow.operators.bash import BashOperator
from raftsched.airflow.sdk import Asset as SdkAsset
from raftsched.airflow.sdk import AssetAll as SdkAll
from raftsched.dags.authoring import DAG, Asset, AssetAny, BashTask, Dataset
from raftsched.errors import DagDefinitionError

A, B, C = Asset("s3://bucket/a"), Dataset("s3://bucket/b"), Asset("file:///data/c.csv")


def condition(dag: DAG) -> object:
    return json.loads(dag.to_spec().asset_condition)


def test_outlets_inlets_and_a_list_schedule() -> None:
    with DAG("producer", schedule=None) as producer:
        BashTask("make", command="true", outlets=[A, "s3://bucket/b"], inlets=[C])
    (spec,) = producer.to_spec().tasks
    assert spec.outlets == ("s3://bucket/a", "s3://bucket/b") and spec.inlets == (C.uri,)
    with DAG("consumer", schedule=[A, B]) as consumer:
        BashTask("use", command="true")
    assert condition(consumer) == {"all": [A.uri, B.uri]}
    spec = consumer.to_spec()
    assert spec.schedule.kind.value == "none" and spec.schedule.display == "assets"


def test_operators_nest() -> None:
    with DAG("n", schedule=A | (B & C)) as n:
        BashTask("t", command="true")
    assert condition(n) == {"any": [A.uri, {"all": [B.uri, C.uri]}]}
    with DAG("m", schedule=AssetAny(A, B)) as m:
        BashTask("t", command="true")
    assert condition(m) == {"any": [A.uri, B.uri]}


def test_no_assets_changes_no_spec_hash() -> None:
    with DAG("plain", schedule=None) as plain:
        BashTask("t", command="true")
    data = plain.to_spec().to_dict()
    assert "asset_condition" not in data and "outlets" not in data["tasks"][0]


@pytest.mark.parametrize("uri", ["", "has space", "x" * 1001, "s3://é"])
def test_bad_uris_are_definition_errors(uri: str) -> None:
    with pytest.raises(DagDefinitionError):
        Asset(uri)


def test_too_deep_a_condition_is_refused() -> None:
    cond = A
    for _ in range(9):
        cond = cond & B
    with pytest.raises(DagDefinitionError), DAG("deep", schedule=cond):
        pass


def test_airflow_names() -> None:
    a, b = AirflowDataset("s3://bucket/a"), SdkAsset("s3://bucket/b")
    with AirflowDAG("af_producer", schedule=None) as producer:
        BashOperator(task_id="make", bash_command="true", outlets=[a])

        @af_task(outlets=[b], inlets=[a])
        def make2() -> None:
            pass

        make2()
    specs = {t.task_id: t for t in producer.to_spec().tasks}
    assert specs["make"].outlets == (a.uri,)
    assert specs["make2"].outlets == (b.uri,) and specs["make2"].inlets == (a.uri,)
    with AirflowDAG("af_consumer", schedule=[a, b]) as consumer:
        BashOperator(task_id="use", bash_command="true")
    assert condition(consumer) == {"all": [a.uri, b.uri]}
    with AirflowDAG("af_all", schedule=SdkAll(a, b)) as all_of:
        BashOperator(task_id="use", bash_command="true")
    assert condition(all_of) == {"all": [a.uri, b.uri]}


def test_watchers_of_the_schedules_assets_become_the_dags_asset_watchers() -> None:
    from raftsched.airflow.providers.standard.triggers.file import FileTrigger as AfFile
    from raftsched.airflow.sdk import AssetWatcher as SdkWatcher
    from raftsched.core import asset_watchers as aw
    from raftsched.dags.authoring import AssetWatcher
    from raftsched.dags.deferral import FileTrigger

    with pytest.raises(DagDefinitionError, match="AssetWatcher"):
        Asset("s3://x", watchers=[object()])
    with pytest.raises(DagDefinitionError, match="raftsched trigger"):
        AssetWatcher("w", object())
    with pytest.raises(ValueError, match="glob"):
        AfFile("/in/*.csv")
    landed = Asset("file:///in", watchers=[AssetWatcher("landing", FileTrigger("/in"))])
    with DAG("watching", schedule=landed | Asset("s3://y")) as native:
        BashTask("t", command="true")
    args = '{"filepath":"/in","poke_interval":1.0,"stable_for":0.0}'
    assert aw.parse(native.to_spec().asset_watchers) == (("file:///in", "landing", "file", args),)
    polled = SdkAsset("file:///af", watchers=[SdkWatcher(name="w", trigger=AfFile("/af"))])
    with AirflowDAG("af_watching", schedule=[polled]) as airflow:
        BashOperator(task_id="t", bash_command="true")
    ((uri, name, kind, _),) = aw.parse(airflow.to_spec().asset_watchers)
    assert (uri, name, kind) == ("file:///af", "w", "file")
    many = Asset(
        "file:///m", watchers=[AssetWatcher(f"w{i}", FileTrigger("/m")) for i in range(11)]
    )
    with pytest.raises(DagDefinitionError, match="limit is 10"), DAG("too_many", schedule=many):
        pass
