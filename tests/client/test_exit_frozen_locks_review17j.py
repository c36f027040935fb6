"""A session left open at interpreter exit is closed by its ``__del__`` even when the exit freezes a daemon thread that
holds a lock the close takes: the interpreter freezes daemon threads where they stand, and a lock one of them held then
is never released. Two such locks are made to be held here by widening, in a module the script imports, the moment a
daemon thread holds them (milliseconds in life) to seconds, so that the exit lands inside it every time:

* the reader's lock of the player's log kept open for quoting (``PlayerProcess._log_lock``), held by an application's
  daemon thread quoting the log (``process.log_tail()``) as the exit came: the player's stop, closing that file, waited
  for it for ever;
* the lock of a logging handler, held by a daemon thread writing a record (renderd's noter thread, logging why it could
  not note a player's helpers; or an application's thread) as the exit came: the player's stop, logging that it stopped,
  waited for it for ever.

Real players, a real interpreter exit (each in a subprocess with a deadline)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

#: Seconds the exit may take: the close (one player, stopped at once) is well under one.
EXIT_WITHIN = 20.0

SLOW_LOG_READ = textwrap.dedent("""
    import threading, time
    import renderd.process as rp
    entered = threading.Event()
    tail_of = rp._tail_of

    def slow_tail_of(fd, lines, since=None):
        if threading.current_thread().name == "log-viewer":  # (the read: as it is elsewhere)
            entered.set()
            time.sleep(30)
        return tail_of(fd, lines, since)

    rp._tail_of = slow_tail_of

    def view(process):
        # An application's daemon thread showing the player's log: it holds the player process, not the session.
        threading.Thread(target=process.log_tail, name="log-viewer", daemon=True).start()
""")

QUOTING_THREAD = """
import frozen_helper, renderd
s = renderd.launch(width=32, height=32, args=['--static-frame'], start_timeout=60)
s.step('Pass')
frozen_helper.view(s.process)
assert frozen_helper.entered.wait(20), "the log was never read"
print(s.pid, flush=True)
"""

# A handler's lock held at the moment the interpreter freezes its daemon threads: taken after logging.shutdown() (an
# atexit function, which takes every handler's lock) has run, by a thread held up while the handler writes the record.
SLOW_HANDLER = textwrap.dedent("""
    import atexit, threading, time
    go = threading.Event()
    held = threading.Event()

    def _after_logging_shutdown():
        # (registered before logging is imported: atexit runs it after logging's own, as the exit goes on)
        go.set()
        held.wait(20)

    atexit.register(_after_logging_shutdown)

    import logging, sys

    class SlowHandler(logging.StreamHandler):
        # A record of the thread named THREAD, once the exit has begun, is written as slowly as a stream that
        # takes 30 s (a pipe nobody empties); it holds the handler's lock meanwhile, as handle() does.
        thread = None

        def handle(self, record):
            if threading.current_thread().name != self.thread:
                return super().handle(record)
            go.wait()
            with self.lock:
                held.set()
                time.sleep(30)
            return super().handle(record)

    handler = SlowHandler(sys.stderr)
    logging.basicConfig(level=logging.DEBUG, handlers=[handler])

    def app_thread():
        logging.getLogger("app").info("working")

    def logging_from(thread):
        SlowHandler.thread = thread
        if thread == "app":
            threading.Thread(target=app_thread, name="app", daemon=True).start()
            return
        import renderd.process as rp
        note = rp.PlayerProcess.note_descendants

        def failing_note(self, wait=True):
            if threading.current_thread().name == thread:  # (the noter finds it cannot note the helpers: it logs why)
                raise OSError("cannot read /proc")
            return note(self, wait=wait)

        rp.PlayerProcess.note_descendants = failing_note
""")

LOGGING_THREAD = """
import sys, frozen_helper, renderd
frozen_helper.logging_from(sys.argv[1])
if sys.argv[2] == "vector":
    vs = renderd.launch_many(2, width=32, height=32, args=['--static-frame'], start_timeout=60)
    vs.step(['Pass', 'Pass'])
    print(*vs.pids, flush=True)
else:
    s = renderd.launch(width=32, height=32, args=['--static-frame'], start_timeout=60)
    s.step('Pass')
    print(s.pid, flush=True)
"""

# Each of renderd's loggers whose code runs at exit, logging there (as a close's warnings do) while an application's
# daemon thread holds the handler's lock.
LOGGING_AT_EXIT = """
import os, frozen_helper
import renderd.client, renderd.process, renderd.vector, renderd.transport.fifo
frozen_helper.logging_from("app")

class LogsAtExit:
    def __del__(self, modules=(renderd.process, renderd.client, renderd.vector, renderd.transport.fifo),
                os=os):
        for module in modules:
            module.log.warning("closing at exit")
        os.write(1, b"logged")

kept = LogsAtExit()
"""


def _exit_closes_the_session(tmp_path, helper: str, script: str, *args: str, players: bool = True) -> tuple[str, str]:
    """Run ``script`` (importing ``helper`` as frozen_helper) to its exit; assert it exits in time and (``players``: it
    prints their pids) its players are not left running and their pipe directories are removed; return its stdout and
    stderr."""
    (tmp_path / "frozen_helper.py").write_text(helper)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the interpreter did not exit within {EXIT_WITHIN:g} s (its player: {out.split()})")
    assert proc.returncode == 0, err
    if not players:
        return out, err
    pids = [int(p) for p in out.split()]
    assert pids, out
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"player pid {pid} still runs"
        except psutil.NoSuchProcess:
            pass
    assert list(tmp.iterdir()) == [], "the sessions' pipe directories were left behind"
    return out, err


def test_exit_while_a_thread_quotes_the_log_closes_the_session(tmp_path):
    _exit_closes_the_session(tmp_path, SLOW_LOG_READ, QUOTING_THREAD)


@pytest.mark.parametrize("kind", ["session", "vector"])
@pytest.mark.parametrize("thread", ["renderd-player-noter", "app"])
def test_exit_while_a_thread_holds_a_log_handler_closes_the_session(tmp_path, thread, kind):
    _, err = _exit_closes_the_session(tmp_path, SLOW_HANDLER, LOGGING_THREAD, thread, kind)
    assert "Exception ignored" not in err, err


def test_renderd_logs_at_exit_without_waiting_for_a_held_handler(tmp_path):
    out, err = _exit_closes_the_session(tmp_path, SLOW_HANDLER, LOGGING_AT_EXIT, players=False)
    assert out == "logged", err
    assert "Exception ignored" not in err, err
