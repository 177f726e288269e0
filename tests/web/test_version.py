"""Every page's footer and the REST API's health answer say which raftsched this webserver
runs (raftsched.__version__, the one place of the version)."""

from __future__ import annotations

from raftsched import __version__


def test_every_page_has_the_version_in_its_footer(client):
    page = client.get("/login")
    assert page.status_code == 200
    assert f'<footer class="footer">raftsched {__version__}</footer>' in page.get_data(as_text=True)


def test_the_rest_api_health_answer_carries_the_version(client, down_client):
    for each, status in ((client, 200), (down_client, 503)):
        answer = each.get("/api/v1/health")
        assert answer.status_code == status, answer.get_json()
        assert answer.get_json()["version"] == __version__


def test_the_openapi_document_describes_it(client):
    document = client.get("/api/v1/openapi.json").get_json()
    assert "version" in document["components"]["schemas"]["Health"]["properties"]
