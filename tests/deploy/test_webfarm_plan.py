"""plan_web_farm: ports, argv, the shared session secret and the nginx config it writes.

No process is started here; tests/integration/test_web_lb.py runs a farm for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched.errors import ConfigError
from raftsched.standalone import webfarm
from raftsched.standalone.webfarm import SECRET_ENV, plan_web_farm


def config_file(tmp_path: Path, webserver: str = "") -> Path:
    path = tmp_path / "raftsched.cfg"
    path.write_text(f"[core]\nhome = {tmp_path}\n[webserver]\n{webserver}")
    return path


def test_without_nginx_webservers_start_at_the_base_port(tmp_path: Path) -> None:
    plan = plan_web_farm(config_file(tmp_path), 2, 18500, tmp_path / "run", use_nginx=False, env={})
    assert plan.url == "http://127.0.0.1:18500"
    assert plan.web_addresses == ("127.0.0.1:18500", "127.0.0.1:18501")
    assert plan.lb_address is None and plan.conf_path is None
    assert [s.name for s in plan.specs] == ["web-18500", "web-18501"]
    argv = list(plan.specs[0].argv)
    assert argv[argv.index("--config") + 1] == str(tmp_path / "raftsched.cfg")
    assert argv[-3:] == ["webserver", "--bind", "127.0.0.1:18500"]


def test_a_missing_secret_key_is_made_up_once_for_all(tmp_path: Path) -> None:
    plan = plan_web_farm(config_file(tmp_path), 3, 18500, tmp_path / "run", use_nginx=False, env={})
    secrets = {spec.env[SECRET_ENV] for spec in plan.specs if spec.env}
    assert len(secrets) == 1 and len(secrets.pop()) >= 32


def test_a_configured_secret_key_is_left_alone(tmp_path: Path) -> None:
    cfg = config_file(tmp_path, "secret_key = from-the-file\n")
    plan = plan_web_farm(cfg, 2, 18500, tmp_path / "run", use_nginx=False, env={})
    assert all(SECRET_ENV not in (spec.env or {}) for spec in plan.specs)
    env = {SECRET_ENV: "from-env"}
    plan = plan_web_farm(config_file(tmp_path), 2, 18500, tmp_path / "r2", use_nginx=False, env=env)
    assert {(spec.env or {})[SECRET_ENV] for spec in plan.specs} == {"from-env"}


def test_a_bad_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        plan_web_farm(config_file(tmp_path, "workers = many\n"), 1, 18500, tmp_path, env={})


def test_with_nginx_it_fronts_the_webservers(tmp_path: Path) -> None:
    if not webfarm.nginx_available():
        pytest.skip("nginx is not installed")
    run = tmp_path / "run"
    plan = plan_web_farm(config_file(tmp_path), 2, 18500, run, use_nginx=True, env={})
    assert plan.url == "http://127.0.0.1:18500"
    assert plan.web_addresses == ("127.0.0.1:18501", "127.0.0.1:18502")
    assert plan.addresses["nginx"] == "127.0.0.1:18500"
    nginx = plan.specs[-1]
    assert nginx.name == "nginx" and list(nginx.argv)[-2:] == ["-g", "daemon off;"]
    assert plan.conf_path == run / "nginx.conf"
    text = plan.conf_path.read_text()
    assert "server 127.0.0.1:18501 " in text and "server 127.0.0.1:18502 " in text
    assert "listen 127.0.0.1:18500;" in text
