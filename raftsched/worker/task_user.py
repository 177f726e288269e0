"""The user task code runs as: ``[worker] run_as_user`` (Airflow's name for it).

Empty (the default), a task runs as the worker's own user, which can read whatever that user
can: the config file, and as root everything. Set (a user name or uid: Debian's ``nobody``,
or a dedicated user), the worker must run as root (or hold CAP_SETUID and CAP_SETGID): each
task process (bash, a cold or warm PythonTask, a callback) takes that user's groups, gid and
uid (``_guard.drop_privileges``, in that order) right before it runs user code. No ``/proc``
file, fd or memory of the worker, its supervisor, the fork servers or the guards (all root's)
is then readable by task code, nor any file the user may not read. Each attempt's working
directory (a fresh temporary folder, removed after) belongs to that user and is its HOME.

What that user still needs: read access to the DAG files, to raftsched and to the Python
interpreter (a PythonTask without a warm fork server runs ``python -m
raftsched.worker._run_python`` as that user), and the worker's temporary folder (TMPDIR) must
be one it can enter. Tasks of different DAGs all run as that one user: a task can read the
``/proc`` files of another task's bash process running at the same time (PythonTasks are
non-dumpable); DAGs that must not see each other need workers with different users.

:func:`resolve` checks the setting when the worker starts (:class:`TaskUserError` says what
is wrong and what to do); :func:`configure` makes it this process's; the runner asks
:func:`current`.
"""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from typing import Any

from raftsched.errors import TaskUserError

CAP_SETGID = 6
CAP_SETUID = 7
KEY = "[worker] run_as_user"


@dataclass(frozen=True, slots=True)
class TaskUser:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    def wire(self) -> dict[str, Any]:
        """As a spawn's spec carries it to the guard (``_guard.drop_privileges``)."""
        return {"name": self.name, "uid": self.uid, "gid": self.gid, "groups": list(self.groups)}

    def environment(self, workdir: str) -> dict[str, str]:
        """What the task's environment says of its user: its own, with the attempt's
        working directory as HOME (the worker's HOME is not the task's to use)."""
        return {"HOME": workdir, "USER": self.name, "LOGNAME": self.name}


def resolve(value: str) -> TaskUser | None:
    """The user ``value`` names (None when empty), once the worker is known to be able to
    switch to it; :class:`TaskUserError` otherwise."""
    value = value.strip()
    if not value:
        return None
    if not sys.platform.startswith("linux"):
        raise TaskUserError(
            f"{KEY} = {value}: running tasks as another user needs Linux; leave it empty here"
        )
    try:
        entry = pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
    except (KeyError, OverflowError):
        raise TaskUserError(
            f"{KEY} = {value}: no such user on this host; create it (useradd --system"
            f" {value if not value.isdigit() else 'raftsched-task'}) or name an existing one"
            " such as nobody"
        ) from None
    if entry.pw_uid == 0:
        raise TaskUserError(
            f"{KEY} = {value} is root: tasks could read the worker's token and everything"
            " else; name an unprivileged user (nobody, or a dedicated one)"
        )
    user = TaskUser(
        entry.pw_name,
        entry.pw_uid,
        entry.pw_gid,
        tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)))),
    )
    if (os.geteuid(), os.getegid()) != (user.uid, user.gid) and not _can_switch():
        raise TaskUserError(
            f"{KEY} = {value}: this worker (uid {os.geteuid()}) cannot switch to it; run the"
            " worker as root (or with CAP_SETUID and CAP_SETGID), or leave it empty"
        )
    return user


def _can_switch() -> bool:
    """Whether this process holds CAP_SETUID and CAP_SETGID (root normally does)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps >> CAP_SETUID & 1 and caps >> CAP_SETGID & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


def readable_by(path: str, user: TaskUser) -> bool:
    """Whether ``user`` may read the file at ``path``: every folder above it searchable and
    the file readable by the owner, group or other bits that apply to it (ACLs aside)."""
    path = os.path.abspath(path)
    folders = []
    parent = os.path.dirname(path)
    while True:
        folders.append(parent)
        if parent == os.path.dirname(parent):
            break
        parent = os.path.dirname(parent)
    try:
        return all(_allows(os.stat(f), user, 1) for f in folders) and _allows(
            os.stat(path), user, 4
        )
    except OSError:
        return False


def _allows(st: os.stat_result, user: TaskUser, bit: int) -> bool:
    if st.st_uid == user.uid:
        return bool(st.st_mode >> 6 & bit)
    if st.st_gid in user.groups or st.st_gid == user.gid:
        return bool(st.st_mode >> 3 & bit)
    return bool(st.st_mode & bit)


def check_config_private(path: str, user: TaskUser | None) -> None:
    """The worker's config file (its token, other sections' secrets) must be out of the
    tasks' reach: :class:`TaskUserError` when ``user`` can read it."""
    if user is not None and os.path.isfile(path) and readable_by(path, user):
        raise TaskUserError(
            f"{KEY} = {user.name}: that user can read this worker's config file {path}, which"
            f" holds tokens; make it private to the worker (chmod 600 {path}) or move it"
            " where that user cannot go"
        )


_current: TaskUser | None = None


def configure(user: TaskUser | None) -> None:
    """The user this process's attempts run as (the worker calls it once it resolved it)."""
    global _current
    _current = user


def current() -> TaskUser | None:
    return _current


def give_workdir(workdir: str, user: TaskUser | None) -> None:
    """The attempt's working directory becomes the user's (mode 0700 from mkdtemp): only it
    and root can enter it."""
    if user is not None:
        os.chown(workdir, user.uid, user.gid)
