"""The Dockerfile, read as text (no Docker engine here): dependencies are installed in a layer
that depends on pyproject.toml alone, before the code is copied, so a code change reuses it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def index_of(steps: list[tuple[str, str]], word: str, pattern: str) -> int:
    for i, (w, rest) in enumerate(steps):
        if w == word and re.search(pattern, rest):
            return i
    raise AssertionError(f"no {word} matching {pattern!r} in the Dockerfile")


def test_dependencies_are_installed_before_the_code_is_copied() -> None:
    steps = instructions()
    copy_meta = index_of(steps, "COPY", r"^pyproject\.toml \./$")
    install_deps = index_of(steps, "RUN", r"pip install -r ")
    copy_code = index_of(steps, "COPY", r"^raftsched ")
    copy_web = index_of(steps, "COPY", r"^web ")
    install_code = index_of(steps, "RUN", r"pip install --no-deps ")
    assert copy_meta < install_deps < min(copy_code, copy_web) < install_code
    # Nothing but pyproject.toml may reach the image before the dependency layer is built.
    copies_before = [rest for w, rest in steps[:install_deps] if w in ("COPY", "ADD")]
    assert copies_before == ["pyproject.toml ./"], copies_before


def test_the_dependency_layer_installs_the_core_and_the_extras_an_image_runs(
    tmp_path: Path,
) -> None:
    """Run the layer's requirement extraction (everything before `&& pip install`) on the real
    pyproject.toml: every process of the image needs the core, the web UI and psycopg."""
    steps = instructions()
    command = steps[index_of(steps, "RUN", r"pip install -r ")][1]
    extract = command.split("&& pip install", 1)[0].replace("/tmp/requirements.txt", "req.txt")
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    python = Path(sys.executable)
    done = subprocess.run(
        ["bash", "-c", extract.replace("python ", f"{python} ", 1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    want = project["dependencies"] + extras["web"] + extras["postgres"]
    assert (tmp_path / "req.txt").read_text().splitlines() == want


def test_the_image_installs_the_license_and_both_extras() -> None:
    steps = instructions()
    copied = " ".join(rest for w, rest in steps if w == "COPY")
    assert "LICENSE" in copied  # pyproject's license-files
    install = steps[index_of(steps, "RUN", r"pip install --no-deps ")][1]
    assert "[web,postgres]" in install
