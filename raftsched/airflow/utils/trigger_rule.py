"""``airflow.utils.trigger_rule``: ``TriggerRule``, the rules raftsched decides by.

The members are raftsched's rules (``all_success``, ``all_done``, ``all_failed``,
``one_success``, ``one_failed``, ``none_failed``, ``none_failed_min_one_success``,
``all_skipped``, ``none_skipped``), which Airflow spells the same. Airflow's others
(``always``, ``one_done``, ``all_done_min_one_success``, ``none_failed_or_skipped``...)
raise an error naming the closest supported rule.
"""

from __future__ import annotations

from typing import Any

from raftsched.airflow._unsupported import refuse
from raftsched.core.model import TriggerRule as _Native

_INSTEAD = {
    "ALWAYS": "use ALL_DONE (it waits for the upstream tasks to finish)",
    "ONE_DONE": "use ONE_SUCCESS or ONE_FAILED",
    "ALL_DONE_MIN_ONE_SUCCESS": "use NONE_FAILED_MIN_ONE_SUCCESS or ALL_DONE",
    "ALL_DONE_SETUP_SUCCESS": "setup/teardown tasks are not supported yet; use ALL_DONE",
    "NONE_FAILED_OR_SKIPPED": "use NONE_FAILED_MIN_ONE_SUCCESS (Airflow's new name for it)",
    "DUMMY": "use ALL_DONE",
}


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name in _INSTEAD:
            refuse(f"TriggerRule.{name}", _INSTEAD[name])
        raise AttributeError(name)


class TriggerRule(metaclass=_Meta):
    """Airflow's ``TriggerRule.ALL_SUCCESS``...: each member is raftsched's rule (a str)."""

    ALL_SUCCESS = _Native.ALL_SUCCESS
    ALL_DONE = _Native.ALL_DONE
    ALL_FAILED = _Native.ALL_FAILED
    ONE_SUCCESS = _Native.ONE_SUCCESS
    ONE_FAILED = _Native.ONE_FAILED
    NONE_FAILED = _Native.NONE_FAILED
    NONE_FAILED_MIN_ONE_SUCCESS = _Native.NONE_FAILED_MIN_ONE_SUCCESS
    ALL_SKIPPED = _Native.ALL_SKIPPED
    NONE_SKIPPED = _Native.NONE_SKIPPED

    @classmethod
    def all_triggers(cls) -> set[str]:
        return {rule.value for rule in _Native}

    @classmethod
    def is_valid(cls, trigger_rule: str) -> bool:
        return trigger_rule in cls.all_triggers()


__all__ = ["TriggerRule"]
