"""A file watcher's trigger (raftsched.triggerer.triggers.file_trigger with ``after``): it
fires with the file's identity, and not again for the version it fired for (the cluster
re-arms it with that identity, core/asset_watchers.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from raftsched.triggerer.triggers import run_trigger


def _args(path: Path, after: str | None) -> str:
    args: dict[str, object] = {"filepath": str(path), "poke_interval": 1.0, "stable_for": 0.0}
    if after is not None:
        args["after"] = after
    return json.dumps(args)


def test_it_fires_once_per_version_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "landed.csv"
    path.write_text("v1")
    event = json.loads(asyncio.run(run_trigger("file", _args(path, ""), str(tmp_path))))
    st = os.stat(path)
    assert event == {
        "path": str(path),
        "size": 2,
        "identity": f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}",
    }

    async def again() -> str:  # the version it fired for: it keeps waiting
        return await run_trigger("file", _args(path, event["identity"]), str(tmp_path))

    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(again(), timeout=1.5))
    aside = tmp_path / "landed.tmp"
    aside.write_text("v2, longer")
    aside.replace(path)
    newer = json.loads(asyncio.run(asyncio.wait_for(again(), timeout=10)))
    assert newer["identity"] != event["identity"] and newer["size"] == 10


def test_a_deferred_tasks_file_trigger_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    event = json.loads(asyncio.run(run_trigger("file", _args(path, None), str(tmp_path))))
    assert event == {"path": str(path), "size": 1}  # no identity: its event as before
