"""The supervisor at the edges of a shutdown and of an idle player's pipe: each player is stopped once, a
player that stops during the shutdown is not said to restart, and an idle server.pipe that is readable but
empty is not taken for an end of file. Real players, real FIFOs; an in-process Supervisor."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import textwrap
import threading

import pytest

from renderd.config import loads
from renderd.daemon import supervisor as supervisor_module
from renderd.daemon.supervisor import State
from renderd.process import PlayerProcess
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.helpers.leaks import pid_gone

needs_xvfb = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
MANAGED = 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'


def _loop_thread() -> threading.Thread:
    (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
    return loop


def test_a_player_whose_stop_is_still_under_way_when_the_shutdown_ends_is_stopped_once(
    supervisor_with, monkeypatch
):
    # A recycle begins stopping a player that ignores SIGTERM (SIGSTOPped) with stop_grace = 3 s; a reload then
    # shortens stop_grace, and the daemon stops: its shutdown deadline passes while the first stop still waits
    # out its grace. The loop thread must not stop (signal, reap) that player a second time meanwhile.
    monkeypatch.setattr(supervisor_module, "SHUTDOWN_SLACK", 0.2)
    first_stops: list[tuple[int, str]] = []  # (pid, thread) of each stop() begun on a player not stopped yet
    stop = PlayerProcess.stop

    def counting_stop(self, *args, **kwargs):
        if not self._stopped:
            first_stops.append((self.pid, threading.current_thread().name))
        return stop(self, *args, **kwargs)

    monkeypatch.setattr(PlayerProcess, "stop", counting_stop)
    config = fast_config().replace("stop_grace = 2.0", "stop_grace = 3.0")
    sup = supervisor_with(config)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGSTOP)  # its SIGTERM waits: the stop takes the whole grace, then SIGKILL
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id, clean=False)
    wait_for(lambda: only_player(sup).state == State.STOPPING and first_stops, DEADLINE, "the recycle's stop")
    assert sup.reload(loads(textwrap.dedent(config.replace("stop_grace = 3.0", "stop_grace = 0.1"))))
    sup.request_stop()
    loop = _loop_thread()
    loop.join(DEADLINE)
    assert not loop.is_alive()
    assert [t for p, t in first_stops if p == pid] == [f"renderd-stop-{pid}"], first_stops


def test_a_player_whose_boot_failure_stop_ends_during_the_shutdown_is_not_said_to_restart(supervisor_with, caplog):
    # The player never sends a first frame and ignores SIGTERM: its boot failure's stop takes stop_grace, and
    # the daemon's stop begins meanwhile. No restart follows, so none may be logged, counted or scheduled.
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    exe = '["/bin/sh", "-c", "trap \'\' TERM; exec sleep 30"]'
    sup = supervisor_with(
        fast_config(executable=exe).replace("start_timeout = 20.0", "start_timeout = 0.3")
        .replace("stop_grace = 2.0", "stop_grace = 1.0")
    )
    wait_for(lambda: only_player(sup) is not None and only_player(sup).state == State.STOPPING, DEADLINE,
             "the boot failure's stop to begin")
    p = only_player(sup)
    restarts = p.restarts
    mark = len(caplog.records)
    sup.request_stop()
    loop = _loop_thread()
    loop.join(DEADLINE)
    assert not loop.is_alive()
    after = [r.getMessage() for r in caplog.records[mark:]]
    assert not [m for m in after if "restarting in" in m], after
    assert [m for m in after if "demo[0]" in m and "stopped during the daemon's shutdown" in m], after
    assert p.restarts == restarts
    assert p.state == State.EXITED and "no first frame within start_timeout" in p.reason


def test_an_idle_server_pipe_readable_but_emptied_before_the_loop_reads_it_is_not_an_end_of_file(
    supervisor_with,
):
    # The loop's select reports the idle player's server.pipe readable (bytes came); before the loop gets to
    # them, another reader of the pipe (a released client still reading, here the test) takes them. The player
    # still holds its end open: nothing to read is not an end of file, and the player must not be stopped for
    # closing a pipe it did not close.
    ticks: list[float] = []

    def tick(now: float) -> float:
        ticks.append(now)
        return 0.05  # (the loop passes every 0.05 s, not once a second when idle: the passes waited for come soon)

    sup = supervisor_with(on_tick=tick)
    pid = ready_pid(sup, watched=True)
    p = only_player(sup)
    fd = p.holder.fileno()
    seen = threading.Event()
    select = sup._selector.select

    def watching_select(timeout=None):
        events = select(timeout)
        if any(key.fd == fd for key, _ in events):
            seen.set()
        return events

    sup._selector.select = watching_select
    count = len(ticks)
    sup.wake()
    wait_for(lambda: len(ticks) >= count + 2, DEADLINE, "the loop in the watching select")
    reader = os.open(p.pair.server_path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with sup.lock:  # the loop, woken by the bytes, waits here before handling them
            writer = os.open(p.pair.server_path, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(writer, b"bytes another reader takes")
            finally:
                os.close(writer)
            assert seen.wait(DEADLINE), "the loop's select did not report server.pipe readable"
            assert os.read(reader, 4096) == b"bytes another reader takes"
            count = len(ticks)
        wait_for(lambda: len(ticks) >= count + 2, DEADLINE, "two more passes of the loop")
        with sup.lock:
            assert p.eof_reason is None, p.eof_reason
            assert p.state == State.READY and p.pid == pid
        assert ready_pid(sup, watched=True) == pid  # (watched again for what comes next)
    finally:
        sup._selector.select = select
        os.close(reader)


@needs_xvfb
def test_a_lease_request_never_takes_an_idle_player_whose_managed_display_died_before_the_loop_saw_it(
    xvfb_spawner, supervisor_with,
):
    # The idle player's managed Xvfb dies; a lease request is taken up before the loop handles that death (the
    # test holds the lock meanwhile). Handed on, the player would fail its client's first step: the request
    # must get a player on a new display instead.
    sup = supervisor_with(fast_config().replace('platform = "headless"', MANAGED))
    pid = ready_pid(sup)
    p = only_player(sup)
    display = p.display
    with sup.lock:
        os.kill(display.pid, signal.SIGKILL)
        wait_for(lambda: pid_gone(display.pid), DEADLINE, "the Xvfb to die")
        lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        assert answer["pid"] != pid
        assert lease.player.display is not display and lease.player.display.alive()
    finally:
        sup.release(lease.id)


def test_a_lease_request_never_takes_an_idle_player_whose_process_exited_before_the_loop_saw_it(supervisor_with):
    # The player runs under a wrapper script that leads its process group; the wrapper dies (SIGKILLed, as the
    # out-of-memory killer would), while the player it started keeps server.pipe open, so the pipe gives no end of
    # file. A lease request taken up before the loop handles that exit must not get the player.
    exe = f'["/bin/sh", "-c", "{PLAYER} --static-frame & wait"]'
    sup = supervisor_with(fast_config(executable=exe))
    pid = ready_pid(sup)
    with sup.lock:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pid_gone(pid), DEADLINE, "the wrapper to die")
        lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        assert answer["pid"] != pid
    finally:
        sup.release(lease.id)
