"""``raftsched dags test`` runs the callbacks here, as a worker would, once per event."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

DAG = textwrap.dedent(
    """\
    from pathlib import Path
    from raftsched import DAG, BashTask
    from raftsched.notifiers import WebhookNotifier

    OUT = Path(__file__).with_name("seen.txt")

    def record(context):
        with OUT.open("a") as out:
            out.write(f"{context['event']} {context['task_id']} {context['try_number']}"
                      f" {context['message']}\\n")
        print("recorded", context["event"])

    with DAG("cb_dag", schedule=None, on_failure_callback=record,
             default_args={"on_success_callback": record}):
        ok = BashTask("ok", command="true")
        bad = BashTask("bad", command="echo nope >&2; exit 2", retries=1,
                       on_retry_callback=record, on_failure_callback=[
                           record, WebhookNotifier(conn_id="hook")])
        ok >> bad
    """
)


def test_dags_test_runs_each_callback_once(tmp_path: Path) -> None:
    (tmp_path / "d.py").write_text(DAG)
    argv = [sys.executable, "-m", "raftsched", "dags", "test", "cb_dag", "--folder", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # the run failed
    seen = (tmp_path / "seen.txt").read_text().splitlines()
    assert seen == [
        "success ok 1 ",
        "retry bad 1 nope",
        "failure bad 2 nope",
        "failure None None task(s) failed: bad",
    ]
    assert "[bad:on_retry_callback] recorded retry" in done.stdout
    assert "skipped: export RAFTSCHED_SECRET_CONN_hook" in done.stdout
