"""The seam between raftsched and pysyncobj (raftsched/raft): our names for its values."""

from __future__ import annotations

import pysyncobj
import pysyncobj.syncobj

from raftsched.raft.outcomes import FailReason, Role, role_name


def test_fail_reasons_are_pysyncobjs_numbers() -> None:
    theirs = {k: v for k, v in vars(pysyncobj.FAIL_REASON).items() if not k.startswith("_")}
    assert {r.name: r.value for r in FailReason} == theirs


def test_roles_are_pysyncobjs_states() -> None:
    states = pysyncobj.syncobj._RAFT_STATE
    assert (Role.FOLLOWER, Role.CANDIDATE, Role.LEADER) == (
        states.FOLLOWER,
        states.CANDIDATE,
        states.LEADER,
    )
    assert [role_name(s) for s in (0, 1, 2, 9)] == ["follower", "candidate", "leader", "9"]
