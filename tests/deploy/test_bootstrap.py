"""scripts/bootstrap.sh: each script installs only the extras it needs, once per pyproject.toml.

Runs the real script against a copy of the tree whose ``.venv/bin/python`` is a stand-in that
records how it was called (nothing is installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls.log"
"""


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "bootstrap.sh", root / "scripts" / "bootstrap.sh")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return root


def bootstrap(root: Path, extras: str) -> list[str]:
    """Source the script with ``extras``; return the pip installs it ran."""
    log = root / ".venv" / "bin" / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "-c", f'source scripts/bootstrap.sh {extras} && echo "PATH=$PATH"'],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"PATH={root / '.venv' / 'bin'}:" in done.stdout
    calls = log.read_text().splitlines() if log.exists() else []
    return [c for c in calls if re.search(r"pip install .*-e ", c)]


def test_each_script_asks_for_its_extras() -> None:
    run = (ROOT / "scripts" / "run").read_text()
    test = (ROOT / "scripts" / "test").read_text()
    assert re.search(r'^source "\$\(dirname "\$0"\)/bootstrap\.sh" web\b', run, re.M)
    assert re.search(r'^source "\$\(dirname "\$0"\)/bootstrap\.sh" dev\b', test, re.M)


def test_installs_the_extras_once_per_pyproject(tmp_path: Path) -> None:
    root = tree(tmp_path)
    assert bootstrap(root, "web") == [
        f"-m pip install --quiet --disable-pip-version-check -e {root}[web]"
    ]
    assert bootstrap(root, "web") == []  # stamped
    assert len(bootstrap(root, "dev")) == 1  # another extras set: its own stamp
    with (root / "pyproject.toml").open("a") as fh:
        fh.write("\n# changed\n")
    assert len(bootstrap(root, "web")) == 1  # pyproject.toml changed


def test_a_fresh_dev_install_covers_the_others(tmp_path: Path) -> None:
    root = tree(tmp_path)
    assert len(bootstrap(root, "dev")) == 1
    assert bootstrap(root, "web") == []  # dev includes web and postgres


def test_extras_are_required(tmp_path: Path) -> None:
    root = tree(tmp_path)
    done = subprocess.run(
        ["bash", "-c", "source scripts/bootstrap.sh"],
        cwd=root,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "usage" in done.stderr
