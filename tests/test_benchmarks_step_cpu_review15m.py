"""benchmarks/step_cpu.py's raw reader ends with an error instead of blocking for ever when the player's answers
are not the captured one's length, and says so when they are not its bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import renderd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import step_cpu  # noqa: E402
import transport as T  # noqa: E402


@pytest.fixture
def session():
    case = T.CASES["rgb300"]
    with renderd.launch(T.player_executable, width=case.width, height=case.height, args=case.player_args(),
                        env=T.PLAYER_ENV, start_timeout=60, step_timeout=30) as s:
        T.setup_session(s, case)
        s.step(T.ACTION)
        yield s, T.capture_answer(case)


def test_a_reader_waiting_for_bytes_that_never_come_is_stopped(session, monkeypatch):
    s, payload = session
    monkeypatch.setattr(T, "STEP_TIMEOUT", 0.5)
    raw = step_cpu.RawReader(s, payload + b"\0")  # one byte more than every answer: the read waits for it
    try:
        with pytest.raises(T.NoCeiling, match="no answer of"):
            with raw.watchdog():
                for _ in range(3):
                    raw.step()
    finally:
        raw.close()


def test_answers_that_differ_from_the_captured_one_are_reported(session):
    s, payload = session
    raw = step_cpu.RawReader(s, payload)
    try:
        with raw.watchdog():
            raw.step()
            raw.step()
        raw.check(payload)  # the same bytes: fine
        with pytest.raises(T.NoCeiling, match="differ from the captured one"):
            raw.check(b"x" * len(payload))
    finally:
        raw.close()
