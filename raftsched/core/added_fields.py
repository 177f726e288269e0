"""Fields added to a model dataclass after the first release, and the field reading they
share with it (``core.model`` re-exports these names)."""

from __future__ import annotations

from dataclasses import MISSING, field, fields
from typing import Any

# Field metadata of a field added to a spec after the first release: while it holds its default
# it is left out of to_dict() (so spec hashes do not change), of digests (core/digest.py) and
# of snapshot records (core/snapshot.py), so old specs, results and snapshots stay identical.
OMIT_AT_DEFAULT = "omit_at_default"


def added_field(default: Any) -> Any:
    """A dataclass field added later: omitted from dicts, digests and snapshots at its default."""
    return field(default=default, metadata={OMIT_AT_DEFAULT: True})


_ADDED_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}  # per type: (name, default)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_dict(value: Any) -> dict[str, Any]:
    """A dataclass's fields by name, values as they are (the caller converts nested ones)."""
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
    return {name: getattr(value, name) for name in names}


def omitted_at_default(value: Any) -> frozenset[str]:
    """Names of ``value``'s added fields that hold their default (to leave out)."""
    added = _ADDED_FIELDS.get(type(value))
    if added is None:  # fields() is slow: once per type (snapshots ask for every spec)
        added = _ADDED_FIELDS[type(value)] = tuple(
            (f.name, f.default)
            for f in fields(value)
            if f.metadata.get(OMIT_AT_DEFAULT) and f.default is not MISSING
        )
    return frozenset(name for name, default in added if getattr(value, name) == default)
