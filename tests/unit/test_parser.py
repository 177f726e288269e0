"""The DAG file parser, on real files: each failing file is reported and none stops the rest.

One parse of tests/fixtures/dags_mixed (copied to a temp folder, plus a file with a syntax
error, which cannot live in the repo: ruff would refuse it) serves most tests: the hanging file
costs the 2 s timeout once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from raftsched.core.model import DagSpec, ScheduleKind
from raftsched.dags.parser import DagFileParser, ParseResult, dag_files, parse_file, parse_folder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TIMEOUT = 2.0
OUTPUT_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ParseResult]:
    folder = tmp_path_factory.mktemp("dags") / "dags"
    shutil.copytree(FIXTURES / "dags_mixed", folder)
    (folder / "syntax_error.py").write_text("from raftsched import DAG\n\ndef broken(:\n    pass\n")
    result = parse_folder(folder, timeout=TIMEOUT, output_limit=OUTPUT_LIMIT, max_workers=2)
    return folder, result


def errors_by_file(folder: Path, result: ParseResult) -> dict[str, str]:
    return {str(Path(e.fileloc).relative_to(folder)): e.message for e in result.errors}


def test_good_dags_load_beside_every_failure(mixed) -> None:
    folder, result = mixed
    assert sorted(s.dag_id for s in result.specs) == [
        "good_bash",
        "good_python",
        "leaves_a_process",  # its background `sleep 60` did not make it time out
        "nested_dag",  # found recursively
        "unique_in_duplicate_file",
    ]
    good = {s.dag_id: s for s in result.specs}
    assert good["good_bash"].fileloc == str(folder / "good.py")
    assert good["good_bash"].task("a").command == "echo shared"  # sibling module importable
    assert good["good_python"].task("call").callable_name == "helper"
    assert good["nested_dag"].schedule.cron == "* * * * * */30"
    for spec in result.specs:
        assert spec.spec_hash == spec.compute_hash()
        assert DagSpec.from_dict(spec.to_dict()) == spec


FAILURES = {
    "syntax_error.py": "SyntaxError: invalid syntax (line 3)",
    "import_error.py": (
        "ModuleNotFoundError: No module named 'module_that_does_not_exist_anywhere'"
    ),
    "raises.py": "ValueError: the config service is down",
    "hangs.py": (
        "timed out after 2s while importing the file (limit: dag_file_timeout);"
        " its processes were killed"
    ),
    "floods.py": (
        "printed 50000000 bytes while being imported, more than the limit of 1048576"
        " (dag_file_output_limit); output was truncated"
    ),
    "cycle.py": "cycle in DAG 'cyclic': a -> b -> c -> a",
    "bad_cron.py": (
        "DAG 'bad_cron': invalid cron expression '0 25 * * *': [0 25 * * *] is not"
        " acceptable, out of range"
    ),
    "exits.py": "the parser process exited with code 3 without a result",
    "aliased_fn.py": (
        "fn of PythonTask 'p' in DAG 'aliased': 'helper' is not a module-level name of the"
        " DAG file; workers look it up there, so define or import it under that name"
    ),
    "zz_duplicate.py": "dag_id 'good_bash' is already defined in {folder}" + os.sep + "good.py",
}


@pytest.mark.parametrize(("file", "message"), FAILURES.items())
def test_each_failing_file_has_one_error(mixed, file: str, message: str) -> None:
    folder, result = mixed
    errors = errors_by_file(folder, result)
    assert errors[file] == message.format(folder=folder)
    assert sum(Path(e.fileloc).name == Path(file).name for e in result.errors) == 1


def test_no_other_errors_and_skipped_and_empty_files(mixed) -> None:
    folder, result = mixed
    assert len(result.errors) == len(FAILURES)
    assert result.empty_files == [str(folder / "helper_only.py")]
    names = {p.name for p in dag_files(folder)}
    assert "_shared.py" not in names and ".hidden.py" not in names
    assert "sub_dag.py" in names


def test_tracebacks_point_at_the_culprit(mixed) -> None:
    _, result = mixed
    by_name = {Path(e.fileloc).name: e for e in result.errors}
    raised = by_name["raises.py"].traceback
    assert 'raises.py", line 5, in build' in raised and "ValueError" in raised
    assert "_child.py" not in raised  # the parser's own frames are left out
    assert "hangs.py" in by_name["hangs.py"].traceback  # faulthandler showed where it hung
    assert "line 3" in by_name["syntax_error.py"].traceback
    assert by_name["floods.py"].traceback.startswith("x")
    assert all(len(e.traceback) <= 16 * 1024 for e in result.errors)


def test_parse_file_and_missing_folder(tmp_path: Path) -> None:
    result = parse_file(FIXTURES / "dags_good" / "daily_two.py", timeout=10, output_limit=1000)
    assert [s.dag_id for s in result.specs] == ["daily_two"]
    assert result.specs[0].schedule.kind is ScheduleKind.CRON
    with pytest.raises(FileNotFoundError, match="does not exist"):
        parse_folder(tmp_path / "nope", timeout=1, output_limit=1)


def test_parser_cache_reparses_only_changed_files(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "dags_good", tmp_path / "dags")
    parser = DagFileParser(tmp_path / "dags", timeout=10, output_limit=10_000)
    first = parser.parse()
    assert sorted(s.dag_id for s in first.specs) == ["daily_two", "hourly_berlin"]
    changed = tmp_path / "dags" / "daily_two.py"
    changed.write_text(changed.read_text().replace("daily_two", "daily_renamed"))
    (tmp_path / "dags" / "hourly_berlin.py").unlink()
    second = parser.parse()
    assert [s.dag_id for s in second.specs] == ["daily_renamed"]
    assert parser.parse().specs == second.specs  # from the cache


def test_example_dags_shipped_with_the_package_parse_cleanly() -> None:
    import raftsched.example_dags as examples

    folder = Path(examples.__file__).parent
    result = parse_folder(folder, timeout=20, output_limit=OUTPUT_LIMIT)
    assert result.errors == []
    assert sorted(s.dag_id for s in result.specs) == [
        "example_callbacks",
        "example_connections",
        "example_etl",
        "example_manual",
        "example_mapping",
        "example_params",
        "example_python_report",
        "example_retries",
        "example_taskflow",
    ]
    kinds = {s.dag_id: s.schedule.kind for s in result.specs}
    assert kinds["example_manual"] is ScheduleKind.NONE
    assert {t.trigger_rule for s in result.specs for t in s.tasks} >= {"all_done"}
