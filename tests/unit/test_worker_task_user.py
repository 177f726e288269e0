"""``[worker] run_as_user`` (worker/task_user.py): what the worker accepts, what it refuses with
which message, and the switch itself (``_guard.drop_privileges``) in a real child process."""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftsched.errors import TaskUserError
from raftsched.worker import _guard, task_user

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


NOBODY = _nobody()
as_root = pytest.mark.skipif(not IS_ROOT or NOBODY is None, reason="needs root and nobody")


def test_empty_means_the_workers_own_user() -> None:
    assert task_user.resolve("") is None
    assert task_user.resolve("   ") is None


@linux
def test_a_missing_user_is_refused_with_what_to_do() -> None:
    with pytest.raises(TaskUserError, match="no such user on this host; create it") as err:
        task_user.resolve("no-such-raftsched-user")
    assert err.value.key == "worker.run_as_user"
    with pytest.raises(TaskUserError, match="no such user"):
        task_user.resolve("4000000000")  # a uid nobody has


@linux
def test_root_is_refused() -> None:
    for value in ("root", "0"):
        with pytest.raises(TaskUserError, match="is root: tasks could read the worker's token"):
            task_user.resolve(value)


@linux
@as_root
def test_a_user_by_name_or_uid() -> None:
    assert NOBODY is not None
    user = task_user.resolve("nobody")
    assert user is not None and user == task_user.resolve(str(NOBODY.pw_uid))
    assert (user.name, user.uid, user.gid) == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    assert NOBODY.pw_gid in user.groups
    env = user.environment("/tmp/raftsched-attempt-x")
    assert env == {"HOME": "/tmp/raftsched-attempt-x", "USER": "nobody", "LOGNAME": "nobody"}


@linux
@pytest.mark.skipif(NOBODY is None, reason="needs the user nobody")
def test_a_worker_that_cannot_switch_users_is_refused() -> None:
    code = "from raftsched.worker import task_user; task_user.resolve('nobody')"
    argv = [sys.executable, "-c", code]
    if IS_ROOT:  # root without CAP_SETUID and CAP_SETGID, as in a container that drops them
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv")
        argv = ["setpriv", "--bounding-set=-setuid,-setgid", "--inh-caps=-all", "--", *argv]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0
    assert "cannot switch to it; run the worker as root" in done.stderr, done.stderr


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder anyone may enter (tmp_path's parents are private to us)."""
    path = Path(tempfile.mkdtemp(prefix="raftsched-user-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_who_may_read_a_file(open_folder: Path) -> None:
    config = open_folder / "raftsched.cfg"
    config.write_text("[worker]\ntoken = t\n")
    st = config.stat()
    other = task_user.TaskUser("other", st.st_uid + 4242, st.st_gid + 4242, (st.st_gid + 4242,))
    in_group = task_user.TaskUser("grouped", st.st_uid + 4242, 99999, (st.st_gid,))
    config.chmod(0o644)
    assert task_user.readable_by(str(config), other)
    config.chmod(0o640)
    assert not task_user.readable_by(str(config), other)
    assert task_user.readable_by(str(config), in_group)
    config.chmod(0o600)
    assert not task_user.readable_by(str(config), in_group)
    config.chmod(0o644)
    open_folder.chmod(0o700)  # a folder it cannot enter keeps the file from it too
    assert not task_user.readable_by(str(config), other)
    assert not task_user.readable_by(str(open_folder / "missing.cfg"), other)


def test_a_config_file_the_task_user_can_read_is_refused(open_folder: Path) -> None:
    config = open_folder / "raftsched.cfg"
    config.write_text("[worker]\ntoken = t\n")
    config.chmod(0o644)
    st = config.stat()
    other = task_user.TaskUser("other", st.st_uid + 4242, st.st_gid + 4242, ())
    with pytest.raises(TaskUserError, match=r"can read this worker's config file .*chmod 600"):
        task_user.check_config_private(str(config), other)
    config.chmod(0o600)
    task_user.check_config_private(str(config), other)
    task_user.check_config_private(str(config), None)  # no run_as_user: nothing to check
    task_user.check_config_private("defaults", other)  # no file read


def _worker(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "raftsched", "--config", str(config), "worker"]
    argv += ["--server", "127.0.0.1:9", *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED")}
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@linux
def test_the_worker_does_not_start_with_a_bad_run_as_user(tmp_path: Path) -> None:
    config = tmp_path / "raftsched.cfg"
    config.write_text("[worker]\nrun_as_user = no-such-raftsched-user\n")
    done = _worker(config, env={"RAFTSCHED_TOKEN": "t"})
    assert done.returncode == 2, done.stderr
    assert "run_as_user = no-such-raftsched-user: no such user" in done.stderr


@linux
@as_root
def test_the_worker_refuses_a_token_on_its_command_line_with_run_as_user(tmp_path: Path) -> None:
    config = tmp_path / "raftsched.cfg"
    config.write_text("[worker]\nrun_as_user = nobody\n")
    config.chmod(0o600)
    done = _worker(config, "--token", "t")
    assert done.returncode == 2, done.stderr
    assert "pass it in RAFTSCHED_TOKEN or [worker] token instead" in done.stderr


@linux
@as_root
def test_drop_privileges_is_for_good_and_leaves_the_process_non_dumpable() -> None:
    assert NOBODY is not None
    user = task_user.resolve("nobody")
    assert user is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: switch, then say what it is and what it can still do
        try:
            os.close(read)
            _guard.drop_privileges(user.wire())
            try:
                os.setuid(0)
                back = True
            except OSError:
                back = False
            state = {
                "uid": os.getresuid(),
                "gid": os.getresgid(),
                "groups": os.getgroups(),
                "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
                "back": back,
            }
            os.write(write, json.dumps(state).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        state = json.loads(f.read())
    os.waitpid(pid, 0)
    uid, gid = NOBODY.pw_uid, NOBODY.pw_gid
    assert state["uid"] == [uid] * 3 and state["gid"] == [gid] * 3
    assert set(state["groups"]) == set(user.groups)
    assert state["dumpable"] == 0 and state["back"] is False


def test_no_user_means_no_switch() -> None:
    before = (os.getresuid(), os.getresgid())
    _guard.drop_privileges(None)
    _guard.drop_privileges({})
    assert (os.getresuid(), os.getresgid()) == before
