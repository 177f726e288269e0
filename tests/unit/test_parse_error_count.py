"""raftsched_dag_parse_errors_total counts each broken DAG file version once: a file that stays
broken through many parses counts once; edited and still broken, once more; a second broken
file, once. (It used to count every broken file again at every parse.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

from raftsched.cluster.metrics import NodeInstruments
from raftsched.cluster.parsing import ParseThread

GOOD = """\
from raftsched import DAG, BashTask

with DAG("fine", schedule=None):
    BashTask("t", command="true")
"""


def errors_counted(inst: NodeInstruments) -> float:
    return inst.registry.get_sample_value("raftsched_dag_parse_errors_total") or 0.0


def parses_after(thread: ParseThread, count: int) -> None:
    deadline = time.monotonic() + 60
    while thread.parses < count:
        assert time.monotonic() < deadline, f"only {thread.parses} parses, wanted {count}"
        time.sleep(0.05)


def test_a_broken_file_counts_once_per_version(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('one')\n")
    inst = NodeInstruments()
    # A full re-parse every 0.2 s: the same files parsed again and again.
    thread = ParseThread(
        tmp_path,
        timeout=20,
        output_limit=1 << 20,
        full_interval=0.2,
        poll_interval=0.05,
        on_result=lambda: None,
        instruments=inst,
    )
    thread.start()
    try:
        parses_after(thread, 4)
        assert errors_counted(inst) == 1

        # One atomic edit (a hidden file renamed over it) with a new mtime for sure.
        edit = tmp_path / ".edit.py"
        edit.write_text("raise RuntimeError('two, still broken')\n")
        os.utime(edit, ns=(time.time_ns(), time.time_ns() + 10**9))
        os.replace(edit, broken)
        seen = thread.parses
        parses_after(thread, seen + 4)
        assert errors_counted(inst) == 2

        (tmp_path / "other.py").write_text("import no_such_module_here\n")
        seen = thread.parses
        parses_after(thread, seen + 4)
        assert errors_counted(inst) == 3
    finally:
        thread.stop()
