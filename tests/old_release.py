"""The previous release of raftsched (0.1.0, release 1) for the rolling-upgrade tests.

It is taken from this repository's git history by commit id (tags may not survive into other
checkouts): ``git archive`` of :data:`OLD_COMMIT` into a cache directory under the system's
temporary directory, once per machine. A "separate virtualenv" is a ``python -m venv
--without-pip`` whose one ``.pth`` file puts the old source tree first and this
checkout's virtualenv's site-packages after it (the dependencies of the two releases are the
same): ~0.1 s, no network. Its ``.pth`` line adds the site-packages directory without
processing the ``.pth`` files inside it, so this checkout's editable install of raftsched is
not on its path: ``import raftsched`` is the old tree's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

OLD_COMMIT = "571c135"  # raftsched 0.1.0: HEAD when release 2 began
OLD_VERSION = "0.1.0"
REPO = Path(__file__).resolve().parents[1]
# Per interpreter too: the old release's virtualenv borrows this one's site-packages (the
# dependencies are the same), so a cache built from another checkout's .venv, since deleted,
# must not be reused.
_PREFIX = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
CACHE = Path(tempfile.gettempdir()) / f"raftsched-release-{OLD_COMMIT}-{_PREFIX}"


def old_source_tree() -> Path:
    """The old release's source tree (extracted once; safe when tests race for it)."""
    tree = CACHE / "src"
    if (tree / "raftsched" / "__init__.py").exists():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"the previous release (git commit {OLD_COMMIT}, raftsched {OLD_VERSION}) is not in"
            f" this checkout's history ({REPO}); the rolling-upgrade tests need it: fetch the"
            f" full history (git fetch --unshallow) or the commit itself"
        )
    staging = Path(tempfile.mkdtemp(dir=CACHE, prefix="src-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", OLD_COMMIT, "raftsched"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(staging)], input=archive.stdout, check=True)
    with contextlib.suppress(OSError):  # another process won the race: use its tree
        staging.rename(tree)
    shutil.rmtree(staging, ignore_errors=True)
    return tree


def old_virtualenv() -> Path:
    """A virtualenv running the old release; returns its python."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    tree = old_source_tree()
    staging = Path(tempfile.mkdtemp(dir=CACHE, prefix="venv-"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(staging)], check=True)
    [site_dir] = (staging / "lib").glob("python*/site-packages")
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (site_dir / "raftsched_old_release.pth").write_text("\n".join([str(tree), *ours]) + "\n")
    # the venv's python is a symlink to the interpreter; its pyvenv.cfg names the staging
    # path only as `command` (informational), so the directory may be renamed
    with contextlib.suppress(OSError):
        staging.rename(venv)
    shutil.rmtree(staging, ignore_errors=True)
    return python


def old_python() -> list[str]:
    """The argv prefix that runs the old release's python: isolated (``-I``), so neither the
    current directory (say, this checkout) nor PYTHONPATH comes before the old tree."""
    return [str(old_virtualenv()), "-I"]


def old_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a child of the old release (no PYTHONPATH pointing here)."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)
    return env
