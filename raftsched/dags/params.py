"""DAG ``params``: named run parameters with defaults and a small JSON-schema subset.

    from raftsched import DAG, Param

    with DAG("report", schedule=None, params={
        "days": Param(7, type="integer", minimum=1, maximum=31, description="window"),
        "region": Param("eu", enum=["eu", "us"]),
        "label": "weekly",                 # a plain value: a Param with that default, any type
        "owner": Param(type="string"),     # no default: every trigger's conf must give it
    }):
        ...

Supported schema keys (as Airflow's ``Param`` spells them): ``type`` (string, integer, number,
boolean, array, object, null, or a list of them), ``enum``, ``minimum``/``maximum`` (numbers),
``minLength``/``maxLength`` (strings), ``description``. No jsonschema dependency: the checks
are the few lines below.

A DagSpec keeps its params as canonical JSON text (``DagSpec.params_json``:
``{name: {"default": value, "type": ...}}``; a param without ``"default"`` has none), bounded by
``raftsched.core.limits.check_params_json``. A trigger's conf is checked with
:func:`check_conf` in the API before anything is proposed (unknown keys are allowed, as in
Airflow); a template sees :func:`effective_params`: the defaults, then the run's conf on top.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from raftsched.core import limits
from raftsched.errors import DagDefinitionError, LimitExceeded

_TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


class _NotSet:
    def __repr__(self) -> str:
        return "NOTSET"


NOTSET: Any = _NotSet()


class Param:
    """One DAG param: a default (or none: the conf must give it) and what values it allows."""

    def __init__(
        self,
        default: Any = NOTSET,
        description: str | None = None,
        *,
        type: str | list[str] | None = None,  # Airflow's and JSON schema's name
        enum: list[Any] | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        minLength: int | None = None,  # JSON schema's spelling, as in Airflow
        maxLength: int | None = None,
    ) -> None:
        self.default = _plain(default) if default is not NOTSET else NOTSET
        self.description = description
        self.schema: dict[str, Any] = {}
        if type is not None:
            self.schema["type"] = list(type) if isinstance(type, list | tuple) else type
        if enum is not None:
            self.schema["enum"] = _plain(list(enum))
        for key, value in (
            ("minimum", minimum),
            ("maximum", maximum),
            ("minLength", minLength),
            ("maxLength", maxLength),
        ):
            if value is not None:
                self.schema[key] = value

    @property
    def has_default(self) -> bool:
        return self.default is not NOTSET

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.schema)
        if self.has_default:
            out["default"] = self.default
        if self.description:
            out["description"] = str(self.description)
        return out

    def __repr__(self) -> str:
        return f"Param({self.default!r}, {self.schema!r})"


def _plain(value: Any) -> Any:
    """Tuples as lists, so a default compares and travels as JSON would carry it."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value  # not JSON-able: check_value's caller names it


def params_json_from(params: object, *, dag_id: str, scheduled: bool) -> str:
    """``DAG(params=...)`` as the canonical JSON text of ``DagSpec.params_json`` ("" for none).

    Raises DagDefinitionError naming the param: a default that breaks its own schema, a value
    that is not JSON, a bad schema, or a param without default on a scheduled DAG (a scheduled
    run has no conf to give it)."""
    if params is None or params == {}:
        return ""
    if not isinstance(params, Mapping):
        raise DagDefinitionError(
            f"params of DAG {dag_id!r} must be a dict of name -> value or Param,"
            f" got {type(params).__name__}",
            dag_id=dag_id,
        )
    out: dict[str, Any] = {}
    for name, given in params.items():
        if not isinstance(name, str):
            raise DagDefinitionError(
                f"params of DAG {dag_id!r}: names must be strings, got {name!r}", dag_id=dag_id
            )
        param = given if isinstance(given, Param) else Param(given)
        entry = param.to_dict()
        problem = _schema_problem(entry)
        if problem is None and param.has_default:
            problem = check_value(entry, param.default)
        if problem is None and scheduled and not param.has_default:
            problem = (
                "has no default, and a scheduled run has no conf to give it (give it a default"
                " or use schedule=None)"
            )
        if problem is not None:
            raise DagDefinitionError(f"param {name!r} of DAG {dag_id!r} {problem}", dag_id=dag_id)
        out[name] = entry
    try:
        text = json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise DagDefinitionError(
            f"params of DAG {dag_id!r} must be JSON values: {err}", dag_id=dag_id
        ) from None
    try:
        limits.check_params_json(f"params of DAG {dag_id!r}", text)
    except LimitExceeded as err:
        raise DagDefinitionError(str(err), dag_id=dag_id) from None
    return text


def _schema_problem(entry: Mapping[str, Any]) -> str | None:
    kinds = entry.get("type")
    for kind in kinds if isinstance(kinds, list) else [] if kinds is None else [kinds]:
        if kind not in _TYPE_CHECKS:
            return f"has unknown type {kind!r}; allowed: {', '.join(_TYPE_CHECKS)}"
    for key in ("minimum", "maximum"):
        if key in entry and not _TYPE_CHECKS["number"](entry[key]):
            return f"has {key} {entry[key]!r}, which is not a number"
    for key in ("minLength", "maxLength"):
        if key in entry and not _TYPE_CHECKS["integer"](entry[key]):
            return f"has {key} {entry[key]!r}, which is not an integer"
    if "enum" in entry and not isinstance(entry["enum"], list):
        return "has an enum that is not a list"
    return None


def check_value(schema: Mapping[str, Any], value: Any) -> str | None:
    """What is wrong with ``value`` under ``schema`` ("expected ..."), or None when it fits."""
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPE_CHECKS.get(k, lambda v: False)(value) for k in allowed):
            return f"is {_show(value)}: expected type {' or '.join(map(str, allowed))}"
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(_show(v) for v in schema["enum"][:20])
        return f"is {_show(value)}: expected one of {choices}"
    if _TYPE_CHECKS["number"](value):
        if isinstance(value, float) and not math.isfinite(value):
            return f"is {value!r}: expected a finite number"
        if "minimum" in schema and value < schema["minimum"]:
            return f"is {_show(value)}: expected at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"is {_show(value)}: expected at most {schema['maximum']}"
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return f"is {_show(value)}: expected at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"is {_show(value)}: expected at most {schema['maxLength']} characters"
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if _jsonable(value) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def load(params_json: str) -> dict[str, dict[str, Any]]:
    """``DagSpec.params_json`` as a dict (bounded as the core bounds it)."""
    return limits.check_params_json("params_json", params_json)


def check_conf(params_json: str, conf: Mapping[str, Any], field: str = "conf_json") -> None:
    """Refuse a trigger's ``conf`` that breaks a param (LimitExceeded: INVALID_ARGUMENT naming
    the param and what it expects). Keys that are no param are allowed, as in Airflow."""
    for name, schema in load(params_json).items():
        if name in conf:
            problem = check_value(schema, conf[name])
        elif "default" not in schema:
            problem = "is missing: it has no default, so the conf must give it"
        else:
            continue
        if problem is not None:
            raise LimitExceeded(field, f"param {name!r} {problem}")


def effective_params(params_json: str, conf: Mapping[str, Any]) -> dict[str, Any]:
    """What ``{{ params }}`` holds in a run: each param's default, then the run's conf on top
    (every conf key, as Airflow's ``dag_run_conf_overrides_params``)."""
    out = {
        name: schema["default"] for name, schema in load(params_json).items() if "default" in schema
    }
    out.update(conf)
    return out
