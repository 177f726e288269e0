"""The web ships inside the package as raftsched.web, templates and static files included."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed():
    """pyproject lists packages by hand (a find directive cannot map web/ to raftsched.web):
    a new subpackage missing from the list would silently be left out of the wheel."""
    listed = set(_setuptools()["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "raftsched").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = sorted(on_disk - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert "raftsched.web" in listed
    assert _setuptools()["package-dir"] == {"raftsched.web": "web"}


def test_templates_and_static_are_package_data():
    patterns = _setuptools()["package-data"]["raftsched.web"]
    web = ROOT / "web"
    files = {p.relative_to(web).as_posix() for p in web.rglob("*") if p.is_file()}
    data = {f for f in files if f.startswith(("templates/", "static/"))}
    covered = {f for f in data for pattern in patterns if Path(f).match(pattern)}
    assert data and covered == data, sorted(data - covered)


def test_installed_package_finds_its_templates():
    import raftsched.web

    package = Path(raftsched.web.__file__).parent
    assert (package / "templates" / "base.html").is_file()
    assert (package / "static" / "style.css").is_file()
