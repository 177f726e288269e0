"""``airflow.models.param``: ``Param`` (checked with jsonschema), ``ParamsDict``."""

from __future__ import annotations

from raftsched.airflow._param import Param, ParamsDict, ParamValidationError

__all__ = ["Param", "ParamValidationError", "ParamsDict"]
