"""``airflow.providers.standard.triggers.file`` (Airflow 3): ``FileTrigger``, raftsched's
file trigger (:class:`raftsched.dags.deferral.FileTrigger`) under Airflow's signature. In an
``AssetWatcher`` it fires once per new version of the file (no ``FileDeleteTrigger`` needed:
the cluster remembers which version it fired for)."""

from __future__ import annotations

from typing import Any

from raftsched.dags import deferral


def FileTrigger(
    filepath: str, recursive: bool = False, poke_interval: float = 5.0, **kwargs: Any
) -> deferral.FileTrigger:
    if recursive or any(ch in str(filepath) for ch in "*?["):
        raise ValueError("FileTrigger: glob patterns and recursive=True are not supported")
    return deferral.FileTrigger(str(filepath), poke_interval=max(1.0, float(poke_interval)))


__all__ = ["FileTrigger"]
