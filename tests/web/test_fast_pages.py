"""What makes the DAG list fast without changing it: links by string joins that equal
url_for's, and the read cache that keeps read-your-writes (web/read_cache.py)."""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, url_for
from raftsched.web.read_cache import ReadCache
from raftsched.web.templating import link_maker, path_url
from web_support import CSRF_META, login

from raftsched.api.gen import common_pb2, dag_pb2

ODD_IDS = ["etl", "a b", "ü/ß", "x%2Fy", "q?x=1#f", "a:b@c", "dots.and-dashes_", "'quote'&;"]


def test_links_are_what_url_for_makes(app: Flask) -> None:
    with app.test_request_context("/dags", base_url="http://example.org/prefix"):
        for dag_id in ODD_IDS:
            for run_id in ("scheduled__2024-01-01T00:00:00+00:00", "manual/ü x"):
                expected = url_for("runs.detail", dag_id=dag_id, run_id=run_id)
                assert path_url("runs.detail", dag_id=dag_id, run_id=run_id) == expected
                assert path_url("runs.detail", run_id=run_id, dag_id=dag_id) == expected
                make = link_maker("runs.detail", "run_id", "dag_id")
                assert make is not None and make(run_id, dag_id) == expected
            assert path_url("dags.detail", dag_id=dag_id) == url_for("dags.detail", dag_id=dag_id)
        # a value that goes into the query string: url_for itself
        assert link_maker("dags.list_page", "search") is None
        assert path_url("dags.list_page", search="a b") == url_for("dags.list_page", search="a b")


def _answer(index: int) -> dag_pb2.ListDagsResponse:
    return dag_pb2.ListDagsResponse(
        total_size=index, freshness=common_pb2.Freshness(applied_index=index)
    )


def test_the_read_cache_keeps_read_your_writes() -> None:
    cache = ReadCache(ttl=3600.0)
    request = dag_pb2.ListDagsRequest(page_size=25)
    key = cache.key("ListDags", request, "")
    cache.put(key, _answer(7))
    assert cache.get(key, 0) == (7, _answer(7))
    assert cache.get(key, 7) is not None
    assert cache.get(key, 8) is None  # the caller has seen more: ask the cluster
    # per request and per caller identity
    assert cache.get(cache.key("ListDags", dag_pb2.ListDagsRequest(page_size=5), ""), 0) is None
    assert cache.get(cache.key("ListDags", request, "another token"), 0) is None
    # reads leave it, a write empties it
    cache.after_call("GetDag")
    assert cache.get(key, 0) is not None
    cache.after_call("PauseDag")
    assert cache.get(key, 0) is None


def test_what_the_read_cache_never_keeps() -> None:
    cache = ReadCache(ttl=3600.0)
    request = dag_pb2.ListDagsRequest()
    assert cache.key("GetStatus", request, "") is None  # not a cacheable read
    key = cache.key("ListDags", request, "")
    cache.put(key, dag_pb2.ListDagsResponse())  # no applied index: nothing to check against
    assert cache.get(key, 0) is None
    off = ReadCache(ttl=0)
    assert off.key("ListDags", request, "") is None


def test_the_list_reuses_its_rows_but_not_another_sessions_csrf_token(
    app: Flask, canned: Any
) -> None:
    cache = app.extensions["raftsched_gateway"].cache
    cache.ttl = 3600.0
    # The canned cluster answers without an applied index: keep its answers as if at 1.
    cache.put = lambda key, answer: key is not None and cache.put_value(key, 1, answer)
    pages = {}
    for user in ("op", "admin", "viewer"):
        client = app.test_client()
        login(client, user)
        first = client.get("/dags").get_data(as_text=True)
        again = client.get("/dags").get_data(as_text=True)
        assert first == again
        token = CSRF_META.search(first)
        assert token is not None
        hidden = set(re.findall(r'name="csrf_token" value="([^"]+)"', first))
        pages[user] = (first, token.group(1), hidden)
    list_calls = [name for name, _ in canned.calls if name == "ListDags"]
    assert len(list_calls) == 1  # one answer for every page view above
    op, admin, viewer = pages["op"], pages["admin"], pages["viewer"]
    assert op[2] == {op[1]} and admin[2] == {admin[1]}  # each form carries its own session's
    assert op[1] != admin[1]
    assert 'class="inline pause-form"' in op[0] and 'class="inline pause-form"' not in viewer[0]
    assert op[0].count('data-dag="') == viewer[0].count('data-dag="') > 0
