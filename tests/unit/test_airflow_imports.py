"""``[core] airflow_imports``: unchanged Airflow DAG files (``import airflow``) parse and run
with it, fail without it, and a real Airflow, where importable, is never shadowed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "airflow_unchanged"


def dags_test(tmp_path: Path, *config: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "raftsched.cfg"
    cfg.write_text("\n".join(["[core]", *config]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "raftsched", "--config", str(cfg), "dags", "test"]
    argv += ["unchanged", "--folder", str(FIXTURES), "--logical-date", "2024-03-02T00:00:00"]
    argv += ["--conf", json.dumps({"out": str(out)})]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_an_unchanged_airflow_file_runs_with_airflow_imports(tmp_path: Path) -> None:
    done = dags_test(tmp_path, "airflow_imports = true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "out" / "hello").read_text() == "2024-03-02\n"
    # the task's own `import airflow` (in its process) is the alias too
    assert (tmp_path / "out" / "which").read_text() == "raftsched.airflow"


def test_without_the_setting_import_airflow_is_an_import_error(tmp_path: Path) -> None:
    done = dags_test(tmp_path, "airflow_imports = false")
    assert done.returncode != 0
    assert "No module named 'airflow'" in done.stdout + done.stderr


def test_a_real_airflow_is_never_shadowed(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "airflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    code = (
        "from raftsched.airflow._imports import install\n"
        "print(install())\n"
        "import airflow\n"
        "print(getattr(airflow, 'REAL', False))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_the_alias_is_one_module_under_two_names() -> None:
    code = (
        "from raftsched.airflow._imports import install\n"
        "assert install()\n"
        "from airflow.decorators import task\n"
        "import airflow.operators.bash, raftsched.airflow.decorators as ours\n"
        "assert task is ours.task\n"
        "from airflow.providers.standard.operators.bash import BashOperator\n"
        "assert BashOperator is airflow.operators.bash.BashOperator\n"
        "try:\n"
        "    import airflow.contrib.nothing\n"
        "except ModuleNotFoundError as err:\n"
        "    print(err.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "airflow.contrib"
