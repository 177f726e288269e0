"""``[core] airflow_imports = true``: unchanged Airflow DAG files, whose ``import airflow...``
gets ``raftsched.airflow...``.

Installed by :func:`raftsched.dags.loading.load_dag_module` when the process's environment
has :data:`ENV` = ``1``, so only in the processes that import DAG files: the parser's child
(the parser sets it from the scheduler's config) and a task's process (the worker lets it
through to its tasks from its own config). Never in a scheduler node, a worker or the CLI
themselves, and never where a real Airflow is importable: then :func:`install` does nothing,
and ``import airflow`` is Airflow's.

The alias is a meta path finder at the END of ``sys.meta_path``: ``airflow.x.y`` is the
module ``raftsched.airflow.x.y`` under a second name (one module object, so
``airflow.decorators.task is raftsched.airflow.decorators.task``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

ENV = "RAFTSCHED_AIRFLOW_IMPORTS"
_PREFIX = "raftsched."


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target module ran when it was imported."""


class AirflowAlias(importlib.abc.MetaPathFinder):
    """Finds ``airflow`` and ``airflow.*`` as ``raftsched.airflow`` and its submodules."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "airflow" and not fullname.startswith("airflow."):
            return None
        real = _PREFIX + fullname
        if importlib.util.find_spec(real) is None:
            return None  # ModuleNotFoundError names the Airflow module, as Airflow's would
        is_package = hasattr(importlib.import_module(real), "__path__")
        return importlib.util.spec_from_loader(fullname, _Alias(real), is_package=is_package)


def enable_for_tasks(allowlist: tuple[str, ...]) -> tuple[str, ...]:
    """In a process that starts task processes (a worker, ``dags test``): set :data:`ENV`
    for them, and return ``allowlist`` (``[worker] task_env_allowlist``) letting it through."""
    os.environ[ENV] = "1"
    return allowlist if ENV in allowlist else (*allowlist, ENV)


def real_airflow_importable() -> bool:
    if any(isinstance(finder, AirflowAlias) for finder in sys.meta_path):
        return False
    return importlib.util.find_spec("airflow") is not None


def install() -> bool:
    """Alias ``airflow`` to ``raftsched.airflow`` in this process, unless a real Airflow is
    importable here. True when the alias is (now) installed."""
    if any(isinstance(finder, AirflowAlias) for finder in sys.meta_path):
        return True
    if real_airflow_importable():
        return False
    sys.meta_path.append(AirflowAlias())
    return True


__all__ = ["ENV", "AirflowAlias", "install", "real_airflow_importable"]
