"""The nginx template renders to a config nginx itself accepts, with the LB choices intact.

``nginx -t`` runs when nginx is installed (scripts/test installs it); in CI a missing nginx
fails instead of skipping.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from raftsched.standalone import webfarm

UPSTREAMS = ["127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"]


def render(run_dir: Path, **kwargs: object) -> str:
    return webfarm.render_nginx_conf(UPSTREAMS, listen="127.0.0.1:18080", run_dir=run_dir, **kwargs)


def test_every_webserver_is_an_upstream_with_passive_health(tmp_path: Path) -> None:
    text = render(tmp_path)
    servers = re.findall(r"^\s*server (\S+) max_fails=1 fail_timeout=5s;", text, re.M)
    assert servers == UPSTREAMS
    assert "proxy_next_upstream_tries 3;" in text
    assert "proxy_connect_timeout 1s;" in text
    assert "health_check" not in re.sub(r"#.*", "", text)  # NGINX Plus only
    assert "add_header X-Upstream $upstream_addr always;" in text


def test_retries_neither_replay_posts_nor_treat_cluster_outages_as_dead_webservers(
    tmp_path: Path,
) -> None:
    """No non_idempotent (a POST that reached a webserver is not replayed) and no http_503
    (the app's "cluster unreachable" must not take every webserver out of rotation)."""
    directive = re.search(r"^\s*proxy_next_upstream ([^;]*);", render(tmp_path), re.M)
    assert directive is not None
    assert directive.group(1).split() == ["error", "timeout"]


def test_everything_nginx_writes_is_under_the_run_dir(tmp_path: Path) -> None:
    text = render(tmp_path)
    found = re.findall(r"^\s*(?:pid|\w+_temp_path|error_log|access_log)\s+(\S+)", text, re.M)
    paths = [p for p in found if p != "off;"]
    assert len(paths) == 8
    assert all(p.rstrip(";").startswith(str(tmp_path)) for p in paths), paths
    assert "@" not in re.sub(r"#.*", "", text)
    assert "daemon" not in re.sub(r"#.*", "", text), "daemon off is passed with -g"


def test_user_line_only_as_root(tmp_path: Path) -> None:
    assert re.search(r"^user root;", render(tmp_path, run_as_root=True), re.M)
    assert not re.search(r"^user ", render(tmp_path, run_as_root=False), re.M)


def test_docker_dns_re_resolves_upstreams(tmp_path: Path) -> None:
    text = webfarm.render_compose_nginx_conf(["web-1:8080", "web-2:8080"])
    assert "resolver 127.0.0.11" in text and "zone raftsched_web" in text
    assert "server web-1:8080 resolve " in text and "server web-2:8080 resolve " in text
    assert "access_log /dev/stdout" in text and "listen 8080;" in text


def test_nginx_accepts_the_rendered_config(tmp_path: Path) -> None:
    if not webfarm.nginx_available():
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed; scripts/test installs it")
        pytest.skip("nginx is not installed")
    conf = tmp_path / "nginx.conf"
    conf.write_text(render(tmp_path))
    webfarm.check_nginx_conf(conf, tmp_path)
