"""The cluster page shows how many outbox entries the metadata DB refused (in quarantine),
from the leader's count, and the command that lists them."""

from __future__ import annotations

from typing import Any

import pytest
from raftsched.web.gateway import Gateway
from web_support import login


@pytest.fixture
def quarantined(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The leader's quarantine count the canned cluster reports (followers report none)."""
    count = {"value": 2}
    real = Gateway._call

    def call(self: Gateway, service: str, method: str, request: Any, **kwargs: Any) -> Any:
        response = real(self, service, method, request, **kwargs)
        if method == "GetStatus":
            for node in response.nodes:
                if node.HasField("db_watermark"):  # the leader
                    node.quarantined = count["value"]
        return response

    monkeypatch.setattr(Gateway, "_call", call)
    return count


def test_cluster_page_shows_quarantined_entries(client, canned, quarantined):
    login(client, "viewer")
    page = client.get("/cluster").get_data(as_text=True)
    assert "2 quarantined</span> outbox entries the metadata DB refused" in page
    assert "raftsched db quarantine list" in page
    assert "DB watermark 4242, outbox backlog 3" in page
    data = client.get("/cluster.json").json
    assert data["quarantined"] == 2
    assert [n["quarantined"] for n in data["nodes"]] == [2, None, None]

    quarantined["value"] = 0
    page = client.get("/cluster").get_data(as_text=True)
    assert "no quarantined outbox entries" in page and "quarantine list" not in page
    canned.leaderless = True
    assert client.get("/cluster.json").json["quarantined"] is None
    assert "quarantined" not in client.get("/cluster").get_data(as_text=True)
