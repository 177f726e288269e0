"""Airflow's ``Param``: a default and a JSON Schema, checked with the ``jsonschema`` library.

The cluster checks a trigger's conf against the schema keys a ``DagSpec`` carries
(``type``, ``enum``, ``minimum``/``maximum``, ``minLength``/``maxLength``: see
:mod:`raftsched.dags.params`). Airflow's ``Param`` takes any JSON Schema keyword
(``pattern``, ``format``, ``items``, ``exclusiveMinimum``...); those are checked with
``jsonschema`` where a DAG file runs: the default when the file is parsed, and the run's value
when an Airflow Python task starts (:func:`check_run_params`), before the callable sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftsched.dags import params as native
from raftsched.errors import DagDefinitionError

# What a DagSpec carries of a param; the rest of a schema stays in the DAG file
SPEC_KEYS = ("type", "enum", "minimum", "maximum", "minLength", "maxLength")
_UI_ONLY = ("title", "section", "values_display", "examples", "const_display")


class ParamValidationError(ValueError):
    """A param value (its default, or a run's) that breaks its schema. Airflow's name."""


def _validator() -> Any:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - the airflow extra installs it
        raise DagDefinitionError(
            "Param of raftsched.airflow needs the jsonschema library: pip install"
            " 'raftsched[airflow]'"
        ) from None
    return jsonschema


class Param(native.Param):
    """``Param(default, description=None, **schema)``: any JSON Schema keyword."""

    def __init__(self, default: Any = native.NOTSET, description: str | None = None, **schema: Any):
        spec = {k: schema[k] for k in SPEC_KEYS if k in schema}
        super().__init__(default, description, **spec)
        self.full_schema = {k: v for k, v in schema.items() if k not in _UI_ONLY}
        jsonschema = _validator()
        try:
            jsonschema.Draft202012Validator.check_schema(self.full_schema)
        except jsonschema.SchemaError as err:
            raise DagDefinitionError(f"Param schema is invalid: {err.message}") from None
        if self.has_default and self.default is not None:
            self.check(self.default, what="default")

    def check(self, value: Any, *, what: str = "value") -> None:
        """Raise ParamValidationError when ``value`` breaks the full schema."""
        jsonschema = _validator()
        validator = jsonschema.Draft202012Validator(
            self.full_schema, format_checker=jsonschema.FormatChecker()
        )
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            raise ParamValidationError(f"{what} {value!r}: {error.message}")

    def resolve(self, value: Any = native.NOTSET) -> Any:
        """The value (or the default), checked: Airflow's ``Param.resolve``."""
        value = self.default if value is native.NOTSET else value
        self.check(value)
        return value


class ParamsDict(dict):  # type: ignore[type-arg]
    """Airflow's name for a DAG's ``params``: here a plain dict of name -> value or Param."""


def check_run_params(params: Mapping[str, Any], effective: Mapping[str, Any]) -> None:
    """Check a run's params (defaults, then conf on top) against each Airflow Param's full
    schema; raises ParamValidationError naming the first param that breaks it."""
    for name, param in params.items():
        if isinstance(param, Param) and name in effective:
            try:
                param.check(effective[name])
            except ParamValidationError as err:
                raise ParamValidationError(f"param {name!r}: {err}") from None


__all__ = ["Param", "ParamValidationError", "ParamsDict", "check_run_params"]
