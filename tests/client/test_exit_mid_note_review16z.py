"""A session left open at interpreter exit is closed by its ``__del__`` even when the exit catches renderd's noter
thread in the middle of a note: that daemon thread is frozen where it stands and never releases the player's note
lock, for which the close waited for ever (the interpreter hung at exit, its pipe directories left behind). The
note, milliseconds of /proc walking in life, is made to last seconds here (a module patching
PlayerProcess.note_descendants) so that the exit lands inside it every time. Real players, a real interpreter exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

#: Seconds the exit may take: the close (two players, each stopped at once) is well under one.
EXIT_WITHIN = 20.0

SLOW_NOTE = textwrap.dedent("""
    import threading, time
    import renderd.process as rp
    entered = threading.Event()
    note = rp.PlayerProcess.note_descendants

    def slow_note(self, wait=True):
        if threading.current_thread().name != "renderd-player-noter":  # (a poll's note: as it is)
            return note(self, wait=wait)
        if not self._noted_lock.acquire(blocking=wait):
            return
        try:
            entered.set()
            time.sleep(30)
        finally:
            self._noted_lock.release()

    rp.PlayerProcess.note_descendants = slow_note
""")

OPEN_VECTOR = """
import slow_note, renderd
vs = renderd.launch_many(2, width=32, height=32, args=['--static-frame'], start_timeout=60)
vs.step(['Pass', 'Pass'])
assert slow_note.entered.wait(20), "the noter never noted"
print(*vs.pids, flush=True)
"""

OPEN_SESSION = """
import slow_note, renderd
s = renderd.launch(width=32, height=32, args=['--static-frame'], start_timeout=60)
s.step('Pass')
assert slow_note.entered.wait(20), "the noter never noted"
print(s.pid, flush=True)
"""


@pytest.mark.parametrize("script", [OPEN_VECTOR, OPEN_SESSION], ids=["vector", "session"])
def test_exit_during_a_note_closes_the_sessions_left_open(tmp_path, script):
    (tmp_path / "slow_note.py").write_text(SLOW_NOTE)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the interpreter did not exit within {EXIT_WITHIN:g} s (its players: {out.split()})")
    assert proc.returncode == 0, err
    pids = [int(p) for p in out.split()]
    assert pids, out
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"player pid {pid} still runs"
        except psutil.NoSuchProcess:
            pass
    assert list(tmp.iterdir()) == [], "the sessions' pipe directories were left behind"
