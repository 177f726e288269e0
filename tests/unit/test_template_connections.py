"""``{{ conn.ID.host }}`` in an Airflow task's template (dags/template_connections.py): the
connection declares itself, renders under Airflow's attribute names, and the task page shows
``***`` for each part."""

from __future__ import annotations

import pytest

from raftsched import secrets as sx
from raftsched.airflow._operators import declare_template_variables
from raftsched.dags import template_connections as tc

URI = "postgresql://bob:pw-1234@db.example:5432/app?sslmode=require"


def test_a_template_names_the_connections_it_reads_and_only_inside_a_block() -> None:
    text = 'cat conn.txt; echo {{ conn.db.host }} {{ conn.get("other").login }} {% if conn.x %}'
    assert tc.named_connections(text) == ["db", "other", "x"]
    options = declare_template_variables(
        {"connections": ["given"]}, "psql -h {{ conn.db.host }} {{ var.value.V }}"
    )
    assert options == {"connections": ["db", "given"], "secrets": ["V"]}
    assert declare_template_variables({}, "echo conn.db") == {}


def test_conn_renders_airflow_names_and_masks_on_the_task_page() -> None:
    env = [(sx.DECLARATION_ENV, sx.encode_declaration([], ["db"]))]
    conn = tc.connections(env, [(sx.conn_env("db"), URI)])
    assert (conn.db.host, conn.db.port, conn.db.login, conn.db.password) == (
        "db.example",
        5432,
        "bob",
        "pw-1234",
    )
    assert conn.get("db").extra_dejson == {"sslmode": "require"}
    assert conn.db.get_uri() == URI and "pw-1234" not in str(conn.db)
    assert conn.get("absent", "d") == "d"
    with pytest.raises(KeyError, match="not declared"):
        _ = conn.absent
    page = tc.connections(env, None)
    assert (page.db.host, page.db.password, page.db.get_uri()) == ("***", "***", "***")
