"""raftsched.clock: the one wall clock, and the test offset the clock-skew nemesis sets."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from raftsched import clock


def test_now_is_aware_utc_and_unshifted_without_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.OFFSET_FILE_ENV, raising=False)
    before = datetime.now(UTC)
    now = clock.now()
    assert now.tzinfo is not None and abs((now - before).total_seconds()) < 5
    assert clock.offset() == 0.0


def test_the_offset_file_shifts_the_clock_within_bounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "offset"
    monkeypatch.setenv(clock.OFFSET_FILE_ENV, str(path))
    for text, expected in [("2.5", 2.5), ("-7", -7.0), ("1e9", 3600.0), ("nan", 0.0), ("x", 0.0)]:
        path.write_text(text)
        monkeypatch.setattr(clock, "_read_at", float("-inf"))  # re-read now
        assert clock.offset() == expected
    path.write_text("30")
    monkeypatch.setattr(clock, "_read_at", float("-inf"))
    shifted = (clock.now() - datetime.now(UTC)).total_seconds()
    assert 29 < shifted < 31
