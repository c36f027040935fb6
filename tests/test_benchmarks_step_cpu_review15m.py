"""benchmarks/step_cpu.py's raw reader ends with an error instead of blocking for ever when the player's answers
are not the captured one's length, and says so when they are not its bytes. (Run in a child: the benchmarks'
``transport`` module would shadow the tests' ``transport`` package in this process.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import renderd
import step_cpu
import transport as T

case = T.CASES["rgb300"]
payload = T.capture_answer(case)
with renderd.launch(T.player_executable, width=case.width, height=case.height, args=case.player_args(),
                    env=T.PLAYER_ENV, start_timeout=60, step_timeout=30) as s:
    T.setup_session(s, case)
    s.step(T.ACTION)
    raw = step_cpu.RawReader(s, payload)
    try:
        with raw.watchdog():
            raw.step()
            raw.step()
        raw.check(payload)  # the same bytes: fine
        try:
            raw.check(b"x" * len(payload))
        except T.NoCeiling as exc:
            print("differ:", exc)
    finally:
        raw.close()
    T.STEP_TIMEOUT = 0.5
    raw = step_cpu.RawReader(s, payload + b"\\0")  # one byte more than every answer: the read waits for it
    try:
        with raw.watchdog():
            for _ in range(3):
                raw.step()
    except T.NoCeiling as exc:
        print("stopped:", exc)
    finally:
        raw.close()
"""


def test_the_raw_reader_is_bounded_and_checks_its_answers():
    done = subprocess.run([sys.executable, "-c", _CHECK, str(BENCHMARKS)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("differ: the player's answers differ from the captured one") for line in lines), lines
    assert any(line.startswith("stopped: no answer of") for line in lines), lines
