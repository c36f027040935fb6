"""The player's log kept open for reading (keep_log_open) never makes a stop wait forever for a read of it: a stop
from a signal handler that interrupted that read in its own thread (a batch job's SIGTERM handler closing its session
while a crash's log lines are being quoted) returns, the read still gets its lines, and the reader is closed as the
read ends. The scenario runs in a Python process of its own (a hang there is bounded by its timeout); the signal is
timed by a wrapper around the real read."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil

from tests.client.conftest import START

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=str(tmp_path), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=START)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the process hung: {out.decode()!r} {err.decode()[-2000:]!r}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stop_from_a_signal_handler_that_interrupted_a_log_read_in_its_thread(tmp_path):
    done = _run(
        """
        import os, signal, sys, time
        import renderd.process as rp

        log = os.path.abspath("player.log")
        proc = rp.PlayerProcess.spawn(["sh", "-c", "echo line one; echo line two; exec sleep 60"], None, log,
                                      keep_log_open=True)
        print("PID", proc.pid, flush=True)
        deadline = time.monotonic() + 20
        while True:
            with open(log) as f:
                if "line two" in f.read():
                    break
            assert time.monotonic() < deadline, "the player wrote no log"
            time.sleep(0.01)
        reader = proc._log_fd
        signal.signal(signal.SIGUSR1, lambda *_: proc.stop(5.0))  # (a SIGTERM handler closing its session)
        real = rp._tail_of

        def interrupted(fd, lines, since=None):
            signal.raise_signal(signal.SIGUSR1)  # (its handler runs here, in this thread, mid-read)
            return real(fd, lines, since)

        rp._tail_of = interrupted
        tail = proc.log_tail()
        rp._tail_of = real
        print("TAIL", repr(tail), flush=True)
        print("STOPPED", proc.returncode is not None, flush=True)
        print("LOGFD", proc._log_fd, flush=True)
        try:
            left = os.readlink(f"/proc/self/fd/{reader}") == log
        except OSError:
            left = False
        print("READER_LEFT_OPEN", left, flush=True)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split("PID ")[1].split()[0])
    assert _gone(pid)
    assert "TAIL 'line one\\nline two'" in done.stdout, done.stdout
    assert "STOPPED True" in done.stdout and "LOGFD None" in done.stdout, done.stdout
    assert "READER_LEFT_OPEN False" in done.stdout, done.stdout  # (the log reader closed once the read ended)
