"""Short runs of the benchmark scripts (run on demand, not measured here): a player that fails in one cell is
reported there, without hanging the run or leaving processes, FIFOs or temporary files behind, and a missing
optional dependency skips its column instead of failing the run.

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

#: The reference player, exiting with code 9 at its CRASH_AFTER+1-th answered action.
CRASHY_PLAYER = """#!{python}
import os, sys
import renderd.player.core as core
from renderd.player.__main__ import main
limit = int(os.environ["CRASH_AFTER"])
count = [0]
answer = core.Player.answer
def counted(self, action):
    count[0] += 1
    if count[0] > limit:
        os._exit(9)
    return answer(self, action)
core.Player.answer = counted
sys.exit(main())
"""


def crashy_player(tmp_path: Path) -> str:
    path = tmp_path / "crashy-player"
    path.write_text(CRASHY_PLAYER.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def processes_with(tmpdir: Path) -> list[str]:
    """Processes whose environment holds ``TMPDIR=tmpdir`` (what a run started and left running)."""
    needle = f"TMPDIR={tmpdir}"
    out = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if f"TMPDIR={env.get('TMPDIR')}" == needle:
            out.append(f"{proc.pid} {proc.info['name']}")
    return out


def run(tmp_path: Path, argv: list[str], *, timeout: float = 30.0, **env: str) -> subprocess.CompletedProcess:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    try:
        result = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmpdir), **env},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        result, hung = None, exc
    deadline = time.monotonic() + 5.0
    while (processes_with(tmpdir) or os.listdir(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.02)
    left, files = processes_with(tmpdir), sorted(os.listdir(tmpdir))
    for line in left:
        psutil.Process(int(line.split()[0])).kill()
    if result is None:
        pytest.fail(f"{' '.join(argv)[:200]} still ran after {timeout:g} s; its output: {hung.stdout!r}")
    assert not left, f"processes left running: {left}"
    assert not files, f"left in TMPDIR: {files}"
    return result


def test_transport_notes_the_columns_whose_player_crashed_and_measures_the_rest(tmp_path):
    # The player answers twice, then exits: the capture and the bare columns do not need more; the ceiling
    # column (raw reader on the player) and renderd's column hit the exit. Each is noted with the exit status
    # (the ceiling's raw reader once spun until a 30 s timer and called it "out of step"), and the run ends
    # with status 1 instead of a traceback.
    result = run(
        tmp_path,
        ["benchmarks/transport.py", "--duration", "0.02", "--repeat", "1", "--cases", "rgb300", "--placements",
         "same", "--no-ai2thor", "--player", crashy_player(tmp_path)],
        timeout=25.0, CRASH_AFTER="2",
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    out = result.stdout
    assert "300x300 RGB, same: column 'raw reader, player' failed: PeerGone: the player closed server.pipe" in out
    assert "300x300 RGB, same: column 'renderd' failed: PlayerCrashed:" in out
    assert out.count("exit code 9") == 2, out
    row = next(line for line in out.splitlines() if line.startswith("300x300 RGB  "))
    assert row.count(" /s ") == 2, row  # raw lockstep and the bare writer were measured


def test_transport_ai2thor_column_with_a_player_that_exits_before_opening_its_pipe(tmp_path):
    # AI2-THOR's FifoServer opens server.pipe with a blocking open: for a player that never opens its end,
    # the column waited forever.
    pytest.importorskip("ai2thor.fifo_server")
    code = (
        "import sys; sys.path.insert(0, '.'); from benchmarks import transport as t\n"
        "t.player_executable = '/bin/false'\n"
        "pin = t.Pinned(*t.cpus_for('same'))\n"
        "try:\n"
        "    t.run_ai2thor(t.CASES['rgb300'], pin, 0.02)\n"
        "except t.PeerGone as exc:\n"
        "    print('PeerGone:', exc)\n"
        "finally:\n"
        "    pin.restore()\n"
    )
    result = run(tmp_path, ["-c", code], timeout=15.0)
    assert result.returncode == 0, result.stderr
    assert "PeerGone: the player exited before writing its first message" in result.stdout
    assert "exit code 1" in result.stdout


def test_vector_without_gymnasium_skips_the_gymnasium_clients(tmp_path):
    code = (
        "import sys, runpy; sys.modules['gymnasium'] = None\n"  # as if not installed
        "sys.argv = ['vector.py', '--ns', '1', '--frames', 'static', '--clients', 'vector,gym-vector,async',"
        " '--rounds', '1', '--duration', '0.02']\n"
        "sys.exit(runpy.run_path('benchmarks/vector.py', run_name='__main__'))\n"
    )
    result = run(tmp_path, ["-c", code], timeout=25.0)
    assert result.returncode == 0, result.stderr
    assert "# gymnasium not importable (pip install gymnasium): gym-vector, async skipped" in result.stdout
    assert "| frames | n | vector | ratio |" in result.stdout
    assert "| static | 1 | " in result.stdout


def test_step_cpu_prints_both_clients_for_each_placement_and_leaves_nothing(tmp_path):
    result = run(tmp_path, ["benchmarks/step_cpu.py", "--case", "rgb300", "--rounds", "1", "--steps", "20"],
                 timeout=40.0)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 300x300 RGB |")]
    placements = ["same", "different"] if len(os.sched_getaffinity(0)) > 1 else ["same"]
    assert [r.split(" | ")[1:3] for r in rows] == [[p, c] for p in placements for c in ("renderd", "raw reader")], rows
    for r in rows:
        cells = r.strip("|").split(" | ")
        assert float(cells[3]) > 0, r  # steps per second
        assert cells[4].count(" + ") == 1 and cells[5].count(" + ") == 1, r
