"""The previous release of raftsched (0.2.0, release 2: the baseline this release describes,
``core/versions_baseline.py``) for the rolling-upgrade tests.

It is taken from this repository's git history by commit id (tags need not survive into
other checkouts, and this history has none): ``git archive`` of :data:`OLD_COMMIT` into a
cache directory under the system's temporary directory, once per machine. A checkout that
lacks the commit (a shallow clone, as CI checkouts often are) first fetches that one commit
from its own remotes (``git fetch --depth=1 REMOTE SHA``, with the checkout's own URL and
credentials; no branch or tag of the checkout changes). A "separate virtualenv" is a ``python
-m venv --without-pip`` whose one ``.pth`` file puts the old source tree first and this
checkout's virtualenv's site-packages after it (the dependencies of the two releases are the
same): ~0.1 s, no network. Its ``.pth`` line adds the site-packages directory without
processing the ``.pth`` files inside it, so this checkout's editable install of raftsched is
not on its path: ``import raftsched`` is the old tree's.

Several processes may want it at once (two xdist workers: tests/unit/test_versions.py and
tests/integration/test_rolling_upgrade.py): one builds it under an exclusive ``flock`` while
the others wait, and a ``ready`` stamp, written last, says the cache is whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

OLD_COMMIT = (
    "ed38e7659c3093da7ba078b32ff2efe19b1afe47"  # raftsched 0.2.0: HEAD when release 3 began
)
OLD_VERSION = "0.2.0"
REPO = Path(__file__).resolve().parents[1]
_LAYOUT = "2"  # bump when the cache's layout changes: an old cache is then left alone
# Per interpreter (path and version) and user too: the old release's virtualenv borrows this
# one's site-packages (the dependencies are the same), so a cache built from another
# checkout's .venv, since deleted or rebuilt, must not be reused.
_KEY = f"{_LAYOUT}|{sys.prefix}|{sys.version}|{os.getuid()}"
CACHE = (
    Path(tempfile.gettempdir())
    / f"raftsched-release-{OLD_COMMIT[:7]}-{hashlib.sha256(_KEY.encode()).hexdigest()[:8]}"
)
_TREE = CACHE / "src"
_VENV = CACHE / "venv"
_READY = CACHE / "ready"
_GIT_TIMEOUT = 120  # a fetch over the network; everything else takes well under a second


def old_source_tree() -> Path:
    """The old release's source tree (built once; safe when processes race for it)."""
    _ensure()
    return _TREE


def old_virtualenv() -> Path:
    """A virtualenv running the old release; returns its python."""
    _ensure()
    return _VENV / "bin" / "python"


def old_python() -> list[str]:
    """The argv prefix that runs the old release's python: isolated (``-I``), so neither the
    current directory (say, this checkout) nor PYTHONPATH comes before the old tree."""
    return [str(old_virtualenv()), "-I"]


def old_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a child of the old release (no PYTHONPATH pointing here)."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)
    return env


def _whole() -> bool:
    return (
        _READY.is_file()
        and (_TREE / "raftsched" / "__init__.py").is_file()
        and (_VENV / "bin" / "python").exists()
    )


def _ensure() -> None:
    if _whole():
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE / "lock"):
        if _whole():  # another process built it while this one waited
            return
        _READY.unlink(missing_ok=True)
        # what a build cut short (killed) or a tmp cleaner left behind
        for part in [_TREE, _VENV, *CACHE.glob("src-*"), *CACHE.glob("venv-*")]:
            shutil.rmtree(part, ignore_errors=True)
        _extract(_TREE)
        _make_venv(_VENV, _TREE)
        _READY.write_text(f"{OLD_COMMIT}\n")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the holder dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git(*args: str, check: bool = False) -> subprocess.CompletedProcess[bytes]:
    # safe.directory: a checkout owned by another user (a container's bind mount) is still
    # only read here
    return subprocess.run(
        ["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), *args],
        capture_output=True,
        check=check,
        timeout=_GIT_TIMEOUT,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},  # never wait on a password prompt
    )


def _have_commit() -> bool:
    return _git("cat-file", "-e", f"{OLD_COMMIT}^{{commit}}").returncode == 0


def _fetch_commit() -> list[str]:
    """Fetch just the old commit from the checkout's remotes (origin first); the reasons
    each one failed, [] once one succeeded."""
    listed = _git("remote").stdout.decode().split()
    remotes = sorted(listed, key=lambda name: name != "origin")
    # a shallow clone stays one (one more shallow root); a complete one must not become one
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
    depth = ["--depth=1"] if shallow else []
    failures = []
    for remote in remotes:
        done = _git("fetch", "--quiet", "--no-tags", *depth, remote, OLD_COMMIT)
        if done.returncode == 0 and _have_commit():
            return []
        failures.append(f"{remote}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    return failures or ["the checkout has no git remote"]


def _extract(tree: Path) -> None:
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.fail(
            f"{REPO} is not a git checkout: the rolling-upgrade tests take the previous release"
            f" (raftsched {OLD_VERSION}, commit {OLD_COMMIT[:7]}) from its history"
        )
    if not _have_commit():
        failures = _fetch_commit()
        if failures:
            pytest.fail(
                f"the previous release (git commit {OLD_COMMIT}, raftsched {OLD_VERSION}) is not"
                f" in this checkout's history ({REPO}) and fetching it failed"
                f" ({'; '.join(failures)}); fetch it: git fetch origin {OLD_COMMIT}"
            )
    archive = _git("archive", "--format=tar", OLD_COMMIT, "raftsched", check=True)
    staging = Path(tempfile.mkdtemp(dir=CACHE, prefix="src-"))
    subprocess.run(
        ["tar", "-x", "-C", str(staging)], input=archive.stdout, check=True, timeout=_GIT_TIMEOUT
    )
    staging.rename(tree)


def _make_venv(venv: Path, tree: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=CACHE, prefix="venv-"))
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(staging)], check=True, timeout=60
    )
    [site_dir] = (staging / "lib").glob("python*/site-packages")
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (site_dir / "raftsched_old_release.pth").write_text("\n".join([str(tree), *ours]) + "\n")
    # the venv's python is a symlink to the interpreter; its pyvenv.cfg names the staging
    # path only as `command` (informational), so the directory may be renamed
    staging.rename(venv)
