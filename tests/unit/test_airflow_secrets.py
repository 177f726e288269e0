"""Airflow's shapes of connections and variable files: translated, or refused by name without
ever quoting a value; an import file is refused whole before any cluster is asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raftsched import airflow_secrets as af
from raftsched.cli import secrets_io_cmd
from raftsched.worker.task_secrets import masked_values, with_secrets
from raftsched.worker.transport import Assignment

SECRET = "pw-Very-S3cret"


def test_an_airflow_connection_object_becomes_a_uri_and_back() -> None:
    obj = {
        "conn_type": "google_cloud_platform",
        "host": "h.example",
        "login": "a@b",
        "password": SECRET + "/:@",
        "schema": "db",
        "port": "5432",
        "extra": json.dumps({"k": "v", "n": [1]}),
    }
    uri = af.connection_uri("gcp", obj)
    assert uri.startswith("google-cloud-platform://a%40b:")
    back = af.connection_fields("gcp", uri)
    assert back["password"] == SECRET + "/:@" and back["port"] == 5432
    assert json.loads(back["extra"]) == {"k": "v", "n": "[1]"}
    assert af.connection_uri("x", json.dumps(obj)) == uri  # an env var's JSON text
    assert af.connection_uri("x", "http://h") == "http://h"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"host": "h", "password": SECRET}, "conn_type is required"),
        ({"conn_type": "http", "passwd": SECRET}, "unknown field(s) ['passwd']"),
        ({"conn_type": "http", "host": "h", "port": SECRET}, "port must be a number"),
        ({"conn_type": "http", "host": "h", "extra": SECRET}, "extra is not a JSON object"),
        (f"not a uri {SECRET}", "is not a URI"),
        (["a list"], "expected a URI string or an object"),
    ],
)
def test_a_bad_connection_is_named_never_quoted(value: object, says: str) -> None:
    with pytest.raises(ValueError) as err:
        af.connection_uri("c1", value)
    assert says in str(err.value) and SECRET not in str(err.value)


def test_the_worker_hands_airflow_env_values_to_every_attempt_masked() -> None:
    env = {"AIRFLOW_VAR_TOKEN": SECRET, "AIRFLOW_CONN_DB": f"postgres://u:{SECRET}x@h/d"}
    backends = (af.AirflowEnvSecretsBackend(env),)
    plain = Assignment(key=None, token=0, try_number=1, kind="bash", command="true")  # type: ignore[arg-type]
    got = with_secrets(None, "w", plain, backends)
    assert dict(got.secret_env) == env
    masked = masked_values(got)
    assert SECRET in masked and SECRET + "x" in masked
    declared = Assignment(
        key=None,  # type: ignore[arg-type]
        token=0,
        try_number=1,
        kind="bash",
        command="true",
        env=(("RAFTSCHED_SECRETS", "var:token,conn:db"),),
    )
    got = dict(with_secrets(None, "w", declared, backends).secret_env)
    assert got["RAFTSCHED_VAR_token"] == SECRET  # Airflow's name is the key upper-cased
    assert got["RAFTSCHED_CONN_db"] == env["AIRFLOW_CONN_DB"]


def _import(tmp_path: Path, content: bytes | str, kind: str = "variables") -> str:
    path = tmp_path / "in.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = [sys.executable, "-m", "raftsched", kind, "import", str(path)]
    argv += ["--server", "127.0.0.1:1"]  # never reached: a bad file is refused before
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert SECRET not in done.stderr
    return done.stderr


def test_a_bad_import_file_is_refused_before_the_cluster(tmp_path: Path) -> None:
    assert "JSON object of names" in _import(tmp_path, json.dumps([SECRET]))
    assert "not a JSON file" in _import(tmp_path, b"\xff{" + SECRET.encode())
    big = b" " * (secrets_io_cmd.MAX_FILE_BYTES + 1)
    assert "larger than 4 MiB" in _import(tmp_path, big)
    many = json.dumps({f"v{i}": "x" for i in range(secrets_io_cmd.MAX_ENTRIES + 1)})
    assert "at most 2000" in _import(tmp_path, many)
    said = _import(tmp_path, json.dumps({"ok": "x", "1bad": SECRET, "long": "y" * 20_000}))
    assert "nothing imported" in said and "'1bad'" in said and "long: longer than" in said
    said = _import(tmp_path, json.dumps({"c": {"conn_type": "x", "pwd": SECRET}}), "connections")
    assert "unknown field(s) ['pwd']" in said
