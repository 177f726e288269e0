"""Dynamic task mapping: one task, one instance per item of a list known only at run time.

A mapped task's spec says how it expands (``TaskSpec.expand_json``, canonical JSON):

- ``{"args": [[name, source], ...]}`` (``.expand(name=source, ...)``): one instance per
  combination of the sources' items (a cross product, the last name varying fastest, as
  Airflow); or
- ``{"kwargs": source}`` (``.expand_kwargs(source)``): one instance per item, a dict of
  arguments.

A source is a literal list, or a reference to a direct upstream task's return value (the
placeholder of ``dags/xcom_args``: ``{"__raftsched_xcom__": task_id, "path": [...]}``).

The core expands the task in the apply that makes it ready (its upstream's outcome commits,
or the run is created, for literal lists): it counts the items (:func:`map_length`), and
creates that many task instances keyed ``task_id[i]`` (:func:`instance_id`) in the same
apply, each with its own tries, state and log. Authored task ids never hold ``[``
(``dags/value_checks.ID_PATTERN``), so an instance id never meets a task's. Deterministic:
the count depends on committed values only. Bounded: past the task's ``max_map_length``
(:data:`~raftsched.core.limits.DEFAULT_MAX_MAP_LENGTH` by default, at most
:data:`~raftsched.core.limits.MAX_MAP_LENGTH`) or the run's
:data:`~raftsched.core.limits.MAX_MAPPED_PER_RUN`, the task FAILS with the reason; zero items
SKIP it (as Airflow). The task's own instance (``rec.tis[task_id]``) stays NONE with
``map_count`` set while its instances run, and takes their joint state once all are done
(:func:`joint_state`): its downstream tasks wait for it, and receive the ordered list of the
instances' return values (:func:`upstream_value`).

Which item an instance gets is not the core's business: the API node that hands out its
lease puts the item in the lease's arguments (:func:`instance_task`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from raftsched.core import limits as lim
from raftsched.core.model import FINISHED_TASK_STATES, TaskSpec, TaskState
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.run_table import LiveRun

XCOM_REF = "__raftsched_xcom__"  # dags/xcom_args.PLACEHOLDER: an upstream's return value
MAP_INDEX_ENV = "RAFTSCHED_MAP_INDEX"
# Room an instance id needs past its task's id ("[9999]"), within the DB's String(250)
MAX_MAPPED_TASK_ID_CHARS = lim.MAX_ID_CHARS - len(f"[{lim.MAX_MAP_LENGTH}]")
_INSTANCE = re.compile(r"(.+)\[(0|[1-9][0-9]{0,5})\]")


def instance_id(task_id: str, map_index: int) -> str:
    """The id of instance ``map_index`` of mapped task ``task_id``."""
    return f"{task_id}[{map_index}]"


def split_id(task_id: str) -> tuple[str, int]:
    """(the task's id, map index) of a task instance id; (task_id, -1) when not mapped."""
    if not task_id.endswith("]"):
        return task_id, -1
    found = _INSTANCE.fullmatch(task_id)
    if found is None:
        return task_id, -1
    return found.group(1), int(found.group(2))


def task_of(task_id: str) -> str:
    """The task (spec, topology) id of a task instance id."""
    return split_id(task_id)[0]


def is_instance(task_id: str) -> bool:
    return split_id(task_id)[1] >= 0


def effective_max(task: TaskSpec) -> int:
    bound = getattr(task, "max_map_length", 0) or lim.DEFAULT_MAX_MAP_LENGTH
    return min(bound, lim.MAX_MAP_LENGTH)


# -- the spec's expansion -------------------------------------------------------------------


def check_expand_json(field: str, text: object, upstream: tuple[str, ...]) -> None:
    """``TaskSpec.expand_json``: "" or an expansion as described above, whose references
    name direct upstream tasks. Raises LimitExceeded."""
    if text == "":
        return
    lim.check_text(field, text, lim.MAX_EXPAND_BYTES)
    assert isinstance(text, str)
    if lim._bracket_depth(text) > lim.MAX_CONF_DEPTH:
        raise LimitExceeded(field, f"is nested deeper than {lim.MAX_CONF_DEPTH} levels")
    try:
        value = lim.loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    lim.check_json_object(field, value, lim.MAX_EXPAND_BYTES, lim.MAX_CONF_DEPTH)
    if set(value) == {"kwargs"}:
        sources = [value["kwargs"]]
    elif set(value) == {"args"} and isinstance(value["args"], list) and value["args"]:
        sources = []
        for i, pair in enumerate(value["args"]):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise LimitExceeded(f"{field}.args[{i}]", "must be a [name, source] pair")
            sources.append(pair[1])
    else:
        raise LimitExceeded(field, 'must be {"args": [[name, source], ...]} or {"kwargs": source}')
    for source in sources:
        if isinstance(source, list):
            lim.check_count(f"{field} literal list", len(source), lim.MAX_MAP_LENGTH)
        elif _is_ref(source):
            if source[XCOM_REF] not in upstream:
                raise LimitExceeded(field, f"maps over {source[XCOM_REF]!r}, not an upstream task")
        else:
            raise LimitExceeded(field, "maps over something that is neither a list nor an XCom")


def _is_ref(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get(XCOM_REF), str)
        and set(value) <= {XCOM_REF, "path"}
        and isinstance(value.get("path", []), list)
    )


def _sources(task: TaskSpec) -> list[Any]:
    spec = lim.loads_json(task.expand_json)
    if "kwargs" in spec:
        return [spec["kwargs"]]
    return [source for _, source in spec["args"]]


def _follow(value: Any, path: list[Any]) -> tuple[bool, Any]:
    for step in path:
        in_dict = isinstance(value, dict) and isinstance(step, str) and step in value
        in_list = isinstance(value, list) and type(step) is int and 0 <= step < len(value)
        if not (in_dict or in_list):
            return False, None
        value = value[step]
    return True, value


def map_length(rec: LiveRun, task: TaskSpec) -> tuple[int, str]:
    """(instances, "") for the task's expansion from the run's committed values, or
    (0, reason) when it cannot expand. Never raises (the spec passed check_expand_json)."""
    total, reason = count_items(task, lambda up: upstream_value(rec, up))
    if reason:
        return 0, reason
    mapped = sum(ti.map_count or 0 for ti in rec.tis.values() if ti.map_count)
    if mapped + total > lim.MAX_MAPPED_PER_RUN:
        return 0, (
            f"its {total} instances would bring the run's mapped instances to {mapped + total},"
            f" past the bound of {lim.MAX_MAPPED_PER_RUN} per run"
        )
    return total, ""


def count_items(task: TaskSpec, value_of: Callable[[str], str | None]) -> tuple[int, str]:
    """(instances, "") of the task's expansion given its upstream tasks' values (JSON text by
    task id), or (0, reason) when it cannot expand (0 items: (0, ""))."""
    try:
        sources = _sources(task)
    except (ValueError, KeyError, TypeError, RecursionError):
        return 0, "its expansion is unreadable"
    total = 1
    bound = effective_max(task)
    for source in sources:
        if isinstance(source, list):
            items = source
        else:
            up = source.get(XCOM_REF, "") if isinstance(source, dict) else ""
            text = value_of(up) if isinstance(up, str) else None
            if text is None:
                return 0, f"it maps over the return value of {up!r}, which returned nothing"
            try:
                value = lim.loads_json(text)
            except (ValueError, RecursionError):
                return 0, f"the return value of {up!r} is not JSON"
            found, items = _follow(value, list(source.get("path") or ()))
            if not found:
                return 0, f"the return value of {up!r} has no item {source.get('path')!r}"
            if not isinstance(items, list):
                kind = "an object" if isinstance(items, dict) else type(items).__name__
                return 0, (
                    f"it maps over the return value of {up!r}, which is {kind}, not a list"
                    " (return a list; for a dict, a list of its items)"
                )
        total *= len(items)
        if total > bound:  # stop multiplying early: the sources are bounded, their product not
            break
    if total > bound:
        return 0, (
            f"it would expand into {total}{' or more' if len(sources) > 1 else ''} instances,"
            f" past its max_map_length of {bound} (raise max_map_length on the task or DAG,"
            f" at most {lim.MAX_MAP_LENGTH}, or map over fewer items)"
        )
    return total, ""


def joint_of(states: list[TaskState]) -> TaskState:
    """The state of a mapped task whose instances all finished in ``states``."""
    if any(s in (TaskState.FAILED, TaskState.UPSTREAM_FAILED) for s in states):
        return TaskState.FAILED
    if states and all(s is TaskState.SKIPPED for s in states):
        return TaskState.SKIPPED
    return TaskState.SUCCESS


def instances(rec: LiveRun, task_id: str) -> list[str]:
    """The instance ids of an expanded mapped task, in map index order ([] otherwise)."""
    ti = rec.tis.get(task_id)
    count = ti.map_count if ti is not None else None
    return [instance_id(task_id, i) for i in range(count or 0)]


def joint_state(rec: LiveRun, task_id: str) -> TaskState | None:
    """The state of an expanded mapped task once all its instances are done (None before):
    FAILED if one failed (or could not run), SKIPPED if all were skipped, else SUCCESS."""
    ids = instances(rec, task_id)
    states = []
    for child_id in reversed(ids):  # the last ones are the last to finish: a short walk
        state = rec.tis[child_id].state
        if state not in FINISHED_TASK_STATES:
            return None
        states.append(state)
    return joint_of(states)


def upstream_value(rec: LiveRun, task_id: str) -> str | None:
    """The return value (JSON text) task ``task_id`` hands downstream: its own, or for an
    expanded mapped task the list of its instances' values in map index order (null for
    one that returned nothing); None when there is none."""
    ti = rec.tis.get(task_id)
    if ti is None:
        return None
    if ti.map_count is None:
        return ti.result_json
    if ti.state is not TaskState.SUCCESS:
        return None
    values = [rec.tis[child].result_json or "null" for child in instances(rec, task_id)]
    return "[" + ",".join(values) + "]"


# -- an instance's lease --------------------------------------------------------------------


def instance_task(task: TaskSpec, map_index: int, upstream_results: Mapping[str, str]) -> TaskSpec:
    """What instance ``map_index`` of mapped ``task`` runs: its spec with its item in the
    arguments (python: kwargs, an upstream's item as a placeholder the worker resolves
    after rendering; bash: ``command``/``env``). Called by the API node that hands out the
    lease, with the upstream values the lease carries. An item that cannot be found (the
    upstream's value changed since the expansion) makes an attempt that fails saying so."""
    if not task.expand_json or map_index < 0:
        return task
    try:
        items = _items(task, map_index, upstream_results)
    except _NoItem as err:
        return _failing(task, str(err))
    if task.kind == "bash":
        command, env = task.command, dict(task.env)
        for name, value in items.items():
            if name in ("command", "bash_command"):
                command = value if isinstance(value, str) else json.dumps(value)
            elif name == "env" and isinstance(value, dict):
                env.update({str(k): str(v) for k, v in value.items()})
            else:
                return _failing(task, f"a bash task cannot map over {name!r}")
        return replace(task, command=command, env=tuple(sorted(env.items())))
    kwargs = json.loads(task.kwargs_json or "{}")
    kwargs.update(items)
    return replace(task, kwargs_json=json.dumps(kwargs, sort_keys=True, separators=(",", ":")))


class _NoItem(Exception):
    pass


def _items(task: TaskSpec, map_index: int, upstream: Mapping[str, str]) -> dict[str, Any]:
    spec = json.loads(task.expand_json)
    if "kwargs" in spec:
        value = _item(spec["kwargs"], map_index, upstream, resolve=True)
        if not isinstance(value, dict):
            raise _NoItem(f"expand_kwargs item {map_index} is not a dict of arguments")
        return value
    pairs = spec["args"]
    lengths = [len(_resolved_list(source, upstream)) for _, source in pairs]
    out: dict[str, Any] = {}
    rest = map_index
    for (name, source), length in reversed(list(zip(pairs, lengths, strict=True))):
        if not length:
            raise _NoItem(f"the list for {name!r} is empty")
        rest, index = divmod(rest, length)
        out[name] = _item(source, index, upstream, resolve=task.kind == "bash")
    return out


def _resolved_list(source: Any, upstream: Mapping[str, str]) -> list[Any]:
    if isinstance(source, list):
        return source
    up = source[XCOM_REF]
    text = upstream.get(up)
    found, value = _follow(None if text is None else json.loads(text), source.get("path") or [])
    if not found or not isinstance(value, list):
        raise _NoItem(f"the return value of {up!r} is not the list it was expanded over")
    return value


def _item(source: Any, index: int, upstream: Mapping[str, str], *, resolve: bool) -> Any:
    """Item ``index`` of a source; an upstream's item stays a placeholder unless ``resolve``."""
    items = _resolved_list(source, upstream)
    if index >= len(items):
        raise _NoItem(f"item {index} is missing from the list it was expanded over")
    if isinstance(source, list) or resolve:
        return items[index]
    return {XCOM_REF: source[XCOM_REF], "path": [*(source.get("path") or []), index]}


def _failing(task: TaskSpec, reason: str) -> TaskSpec:
    text = f"raftsched: mapped task {task.task_id!r}: {reason}"
    if task.kind == "bash":
        return replace(task, command=f"echo {json.dumps(text)} >&2; exit 1")
    kwargs = {"__raftsched_mapping_error__": text}
    return replace(task, kwargs_json=json.dumps(kwargs))
