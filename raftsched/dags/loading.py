"""Importing a DAG file as a module, the one way the parser's child and a PythonTask both do it.

The file's directory goes first on ``sys.path`` (like Airflow, so it can import its
neighbours), and the module gets a name of its own, built from a digest of the path and the
file's stem, so two files with the same name never share a module. Meant for a child process
that imports one file: it changes ``sys.path`` and ``sys.modules`` for good. With
``RAFTSCHED_AIRFLOW_IMPORTS=1`` in the environment (``[core] airflow_imports``), ``import
airflow`` in the file gets ``raftsched.airflow`` (:mod:`raftsched.airflow._imports`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType


def load_dag_module(path: str) -> ModuleType | None:
    """Import and execute the DAG file at ``path``; None when Python has no loader for such a
    file (nothing is executed then). Whatever executing the file raises propagates."""
    if os.environ.get("RAFTSCHED_AIRFLOW_IMPORTS") == "1":  # [core] airflow_imports
        from raftsched.airflow._imports import install

        install()
    file = Path(path)
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    name = f"raftsched_dagfile_{digest}_{re.sub(r'[^0-9A-Za-z_]', '_', file.stem)}"
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
