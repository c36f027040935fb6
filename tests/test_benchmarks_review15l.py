"""The benchmark scripts measure what their labels say and refuse arguments that would print a meaningless table.

* A case whose label says the metadata is read every step (``objects300read``) makes every renderd column
  decode it every step, in ``transport_http.py`` and ``step_cpu.py`` as in ``transport.py`` (the first two
  stepped without reading it, so the row compared renderd without a decode against AI2-THOR with one).
* A duration of 0 or less, no run, an unknown placement, frame kind or size, no step or frame: a usage error
  (exit status 2) naming the option, before any player is started. Before, ``--duration -1`` printed the rate
  of one batch of steps, ``--repeat 0`` an empty table with status 0, ``step_cpu.py --placements both`` ran the
  "different" placement under the label "both", ``vector.py --frames bogus`` measured rendered frames under the
  label "bogus", and ``--ns x``, ``--steps 0`` and ``player_render.py --frames 0`` ended in a traceback.

Each run gets its own TMPDIR, which must be empty afterwards, and no process may be left that inherited it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _left_behind(tmpdir: Path) -> list[psutil.Process]:
    """Processes whose environment holds ``TMPDIR=tmpdir`` (what a run started and left running)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TMPDIR") == str(tmpdir):
                out.append(proc)
        except psutil.Error:
            continue
    return out


def run(tmp_path: Path, argv: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    try:
        result = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmpdir)},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        result, hung = None, exc
    deadline = time.monotonic() + 5.0
    while (_left_behind(tmpdir) or os.listdir(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.02)
    left, files = _left_behind(tmpdir), sorted(os.listdir(tmpdir))
    for proc in left:
        proc.kill()
    if result is None:
        pytest.fail(f"{' '.join(argv)[:200]} still ran after {timeout:g} s; its output: {hung.stdout!r}")
    assert not left, f"processes left running: {left}"
    assert not files, f"left in TMPDIR: {files}"
    return result


COUNT_DECODES = """
import sys
sys.path.insert(0, '.')
import renderd.event as E
calls = [0]
decode = E.decode_metadata
def counted(*args, **kwargs):
    calls[0] += 1
    return decode(*args, **kwargs)
E.decode_metadata = counted
from benchmarks import step_cpu, transport as T, transport_http as H
case = T.CASES['objects300read']
pin = T.Pinned(*T.cpus_for('same'))
try:
    for transport in ('fifo', 'http'):
        calls[0] = 0
        H.run_session(case, pin, 0.05, transport)
        print(transport, calls[0])
finally:
    pin.restore()
payload = T.capture_answer(case)
calls[0] = 0
step_cpu.one_round(case, 'same', 40, payload)
print('step_cpu', calls[0])
"""


def test_the_metadata_read_case_decodes_the_metadata_every_step_in_every_renderd_column(tmp_path):
    result = run(tmp_path, ["-c", COUNT_DECODES], timeout=60.0)
    assert result.returncode == 0, result.stderr
    counts = dict(line.split() for line in result.stdout.splitlines())
    # transport_http: 30 warm-up steps and at least one batch of 10 measured, each with its decode
    assert int(counts["fifo"]) >= 40, counts
    assert int(counts["http"]) >= 40, counts
    # step_cpu: 30 warm-up steps, then 40 measured by Session.send + Session.recv
    assert int(counts["step_cpu"]) >= 40, counts


BAD_ARGUMENTS = [
    ("transport.py", ["--duration", "-1"], "--duration must be a positive number of seconds, not -1"),
    ("transport.py", ["--duration", "0"], "--duration must be a positive number of seconds, not 0"),
    ("transport.py", ["--repeat", "0"], "--repeat must be at least 1, not 0"),
    ("transport.py", ["--cases", ","], "--cases names no case"),
    ("transport_http.py", ["--duration", "-0.5"], "--duration must be a positive number of seconds, not -0.5"),
    ("transport_http.py", ["--repeat", "-2"], "--repeat must be at least 1, not -2"),
    ("step_cpu.py", ["--placements", "both"], "unknown placement 'both'; expected same or different"),
    ("step_cpu.py", ["--steps", "0"], "--steps must be at least 1, not 0"),
    ("step_cpu.py", ["--rounds", "0"], "--rounds must be at least 1, not 0"),
    ("vector.py", ["--frames", "bogus"], "unknown frames 'bogus'; expected static or rendered"),
    ("vector.py", ["--ns", "x"], "--ns: 'x' is not a player count"),
    ("vector.py", ["--ns", "2,0"], "--ns: '0' is not a player count"),
    ("vector.py", ["--duration", "-1"], "--duration must be a positive number of seconds, not -1"),
    ("vector.py", ["--clients", "bogus"], "unknown client 'bogus'; expected one or more of vector,"),
    ("player_render.py", ["--frames", "0"], "--frames must be at least 1, not 0"),
    ("player_render.py", ["--sizes", "300"], "--sizes: '300' is not WIDTHxHEIGHT"),
]


@pytest.mark.parametrize(("script", "args", "message"), BAD_ARGUMENTS,
                         ids=[f"{s} {' '.join(a)}" for s, a, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_usage_errors_before_any_player_starts(tmp_path, script, args, message):
    result = run(tmp_path, [f"benchmarks/{script}", *args], timeout=30.0)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert f"{script}: error: {message}" in result.stderr, result.stderr
    assert result.stdout == "", result.stdout  # nothing measured, no table
