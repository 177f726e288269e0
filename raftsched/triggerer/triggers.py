"""The triggers a triggerer runs, by kind: each is a coroutine that returns the event (a
JSON value) when it fires, or raises (the task fails with the traceback).

Built in: ``time`` (``moment``), ``file`` (``filepath`` exists, optionally with a size
stable for ``stable_for`` seconds, polled every ``poke_interval`` >= 1 s; an asset watcher's
has ``after``, the version of the file it last fired for, and fires for another one only).
A user-defined trigger is ``user:<module>.<Class>``: the module is imported from the DAG
file's folder, the class is built with the trigger's arguments and its ``async run()``
returns the event (or is an async generator whose first item is). It runs here, never in
a scheduler node.
``http`` (``url`` answers ``status``, optionally with ``body_contains`` in its body, polled
every ``poke_interval`` seconds, each request at most 10 s and 1 MiB read). ``sql`` and
``external`` ask the cluster under the trigger's lease (``cluster_triggers``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raftsched.dags.deferral import MIN_POKE_INTERVAL
from raftsched.errors import TriggerError
from raftsched.triggerer.cluster_triggers import WITH_HELP

USER_PREFIX = "user:"


async def time_trigger(args: dict[str, Any], fileloc: str) -> Any:
    moment = datetime.fromisoformat(str(args["moment"]))
    if moment.tzinfo is None:
        raise TriggerError("a time trigger's moment needs a time zone")
    while True:  # short sleeps: a clock that jumps is followed within a second
        left = (moment - datetime.now(UTC)).total_seconds()
        if left <= 0:
            return moment.astimezone(UTC).isoformat()
        await asyncio.sleep(min(left, 1.0))


async def file_trigger(args: dict[str, Any], fileloc: str) -> Any:
    path = str(args["filepath"])
    interval = max(MIN_POKE_INTERVAL, float(args.get("poke_interval", MIN_POKE_INTERVAL)))
    stable_for = max(0.0, float(args.get("stable_for", 0.0)))
    after = args.get("after")  # an asset watcher's: the version it last fired for ("": none)
    last: tuple[int, float] | None = None  # (size, since when, monotonic)
    loop = asyncio.get_running_loop()
    while True:
        try:
            st = os.stat(path)
            size: int | None = st.st_size
            identity = f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"
        except FileNotFoundError:
            size, identity = None, ""
        if size is not None and after is not None and identity == after:
            size = None  # the version it fired for: wait for another one
        if size is not None:
            now = loop.time()
            if last is None or last[0] != size:
                last = (size, now)
            if now - last[1] >= stable_for:
                if after is not None:  # core/asset_watchers keeps it for the next trigger
                    return {"path": path, "size": size, "identity": identity}
                return {"path": path, "size": size}
        else:
            last = None
        await asyncio.sleep(interval if stable_for == 0 else min(interval, stable_for))


HTTP_TIMEOUT = 10.0  # seconds per request: a slow server delays its trigger, nothing else
HTTP_MAX_BODY = 1024 * 1024  # bytes of an answer read (what a predicate sees)


async def http_trigger(args: dict[str, Any], fileloc: str) -> Any:
    url, method = str(args["url"]), str(args.get("method", "GET"))
    if not url.startswith(("http://", "https://")):
        raise TriggerError(f"an http trigger's url must be http(s)://, got {url[:100]!r}")
    want, needle = int(args.get("status", 200)), str(args.get("body_contains", ""))
    interval = max(MIN_POKE_INTERVAL, float(args.get("poke_interval", 5.0)))
    while True:
        status, body = await asyncio.to_thread(_request, url, method)
        if status == want and needle in body:
            return {"status": status, "body": body[:4096]}
        await asyncio.sleep(interval)


def _request(url: str, method: str) -> tuple[int, str]:
    """(status, body as text); a connection that fails is status 0 (poll again)."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as answer:
            return answer.status, answer.read(HTTP_MAX_BODY).decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read(HTTP_MAX_BODY).decode("utf-8", "replace")
    except (OSError, ValueError):
        return 0, ""


async def user_trigger(kind: str, args: dict[str, Any], fileloc: str) -> Any:
    target = kind[len(USER_PREFIX) :]
    module_name, _, class_name = target.rpartition(".")
    if not module_name or not class_name:
        raise TriggerError(f"{kind!r}: expected user:<module>.<Class>")
    folder = str(Path(fileloc).parent)
    if folder not in sys.path:  # the DAG folder, as the worker imports a DAG file
        sys.path.insert(0, folder)
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if cls is None:
        raise TriggerError(f"{module_name} has no class {class_name}")
    run = cls(**args).run()
    if hasattr(run, "__anext__"):  # Airflow's shape: an async generator of TriggerEvents
        event = await run.__anext__()
        await run.aclose()
    else:
        event = await run
    return getattr(event, "payload", event)


BUILT_IN: dict[str, Callable[[dict[str, Any], str], Awaitable[Any]]] = {
    "time": time_trigger,
    "file": file_trigger,
    "http": http_trigger,
}


async def run_trigger(kind: str, args_json: str, fileloc: str, help: Any = None) -> str:
    """Run the trigger until it fires; its event as JSON text. ``help``: what the ``sql``
    and ``external`` triggers ask the cluster, bound to the trigger's lease
    (``cluster_triggers.ClusterHelp``)."""
    args = json.loads(args_json or "{}")
    if not isinstance(args, dict):
        raise TriggerError("a trigger's arguments must be a JSON object")
    if kind.startswith(USER_PREFIX):
        event = await user_trigger(kind, args, fileloc)
    elif kind in BUILT_IN:
        event = await BUILT_IN[kind](args, fileloc)
    elif kind in WITH_HELP and help is not None:
        event = await WITH_HELP[kind](args, help)
    else:
        kinds = sorted([*BUILT_IN, *WITH_HELP])
        raise TriggerError(f"unknown trigger kind {kind!r} (this triggerer runs {kinds})")
    return json.dumps(event, sort_keys=True, default=str)
