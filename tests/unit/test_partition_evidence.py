"""What the partition suite prints when the cluster never settled (scripts/partition/evidence.py):
a behind node's distinct tracebacks first, counted, and the CI excerpt starts there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.partition import evidence

TICK_FAILURE = """\
2026-12-03 21:57:44,906 ERROR pysyncobj.syncobj [Thread-2] failed _onTick in _autoTickThread
Traceback (most recent call last):
  File "pysyncobj/pickle.py", line 63, in loads
    return pickle.loads(data)
_pickle.UnpicklingError: pickle data was truncated

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "pysyncobj/syncobj.py", line 977, in __onMessageReceived
    newEntries = [pickle.loads(self.__recvTransmission)]
UnicodeDecodeError: 'utf-8' codec can't decode byte 0xc2 in position 131046
"""
OTHER = """\
2026-12-03 21:58:00,000 ERROR raftsched.cluster.node [MainThread] apply listener failed
Traceback (most recent call last):
  File "raftsched/cluster/node.py", line 170, in _apply_command
KeyError: 'x'
"""
INFO = "2026-12-03 21:58:01,000 INFO raftsched.cluster.node [MainThread] hello\n"


def test_distinct_tracebacks_newest_first_with_their_counts() -> None:
    text = TICK_FAILURE * 3 + INFO + OTHER + INFO + TICK_FAILURE
    out = evidence.tracebacks(text.splitlines())
    assert out[0].startswith("4x ") and "failed _onTick" in out[0]
    tick = out[: out.index(next(ln for ln in out if ln.startswith("1x ")))]
    assert any("UnpicklingError" in ln for ln in tick)  # the chained one stays whole
    assert tick[-1].strip().startswith("UnicodeDecodeError")
    assert any(ln.startswith("1x ") and "apply listener failed" in ln for ln in out)
    assert evidence.tracebacks(INFO.splitlines()) == []
    short = evidence.tracebacks(TICK_FAILURE.splitlines(), tail=2)
    assert short[1].strip().startswith("...") and short[-1].strip().startswith("UnicodeDecode")


class _Cluster:
    names = ["n0", "n1"]

    def __init__(self, logs: Path) -> None:
        self.log_dir = logs
        self.signals: list[int] = []

    def log_path(self, i: int) -> Path:
        return self.log_dir / f"node-{i}.log"

    def _signal(self, i: int, _sig: int) -> None:
        self.signals.append(i)


def test_the_node_behind_comes_first_and_the_excerpt_starts_there(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(evidence.time, "sleep", lambda _s: None)
    cluster = _Cluster(tmp_path)
    (tmp_path / "node-0.log").write_text(INFO * 3)
    stacks = "Thread 0x01 (most recent call first):\n" + '  File "x.py", line 1 in f\n' * 500
    (tmp_path / "node-1.log").write_text(TICK_FAILURE * 50 + stacks)
    raw = {0: {"applied_index": 2200, "role": "leader"}, 1: {"applied_index": 284}}
    text = evidence.unsettled_evidence(cluster, raw)
    assert cluster.signals == [1]
    lines = text.splitlines()
    assert lines[0].startswith(evidence.MARK)
    assert lines[1].startswith("n1 (BEHIND)") and "284" in lines[1]
    assert "50x" in lines[3] and "failed _onTick" in lines[3]
    assert text.index("UnicodeDecodeError") < text.index("stacks:") < text.index("n0:")
    stderr = "x" * 50_000 + "\n" + text + "\n" + "y" * 50_000
    cut = evidence.excerpt(stderr, limit=2000)
    assert cut.startswith(evidence.MARK) and "UnicodeDecodeError" in cut
    assert evidence.excerpt("no mark: its tail", limit=4) == "tail"
