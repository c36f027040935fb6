"""The supervisor never waits on a managed Xvfb with its lock held (giving back the last reference on one, or a
display that dies just before a player is spawned), and never hands on a player released cleanly with an
answer still on its way. Real players, a real Xvfb, real FIFOs; an in-process Supervisor."""

from __future__ import annotations

import os
import shutil
import signal
import threading

import pytest

from renderd.daemon.supervisor import State
from renderd.platforms import xvfb
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import (
    DEADLINE,
    only_player,
    ready_pid,
    send_slow_action,
)
from tests.helpers.health_review14e import _step
from tests.helpers.leaks import pid_gone

needs_xvfb = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
MANAGED = 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'
#: How long a control request may take while the supervisor waits on an Xvfb (it should not wait at all).
ANSWER_BOUND = 2.0


def _health_config(interval: float) -> str:
    return fast_config(extra=f"health_interval = {interval}")


def _loop_thread() -> threading.Thread:
    (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
    return loop


def _answers_within(fn, bound: float) -> bool:
    """Whether ``fn()``, called on a thread of its own, returns within ``bound`` seconds."""
    done = threading.Event()

    def call() -> None:
        fn()
        done.set()

    t = threading.Thread(target=call, daemon=True)
    t.start()
    answered = done.wait(bound)
    return answered


@needs_xvfb
def test_giving_back_the_last_reference_on_a_hung_managed_display_does_not_stall_control_requests(
    xvfb_spawner, supervisor_with, monkeypatch
):
    # The environment is removed: its selection, the last user of its managed Xvfb, is given back, which stops
    # that Xvfb (SIGTERM, 5 s grace, SIGKILL, reap). A hung one takes the whole grace; the test holds the real
    # stop at its start instead. Meanwhile a status request must be answered, and a daemon stopping then must
    # wait for that stop: no Xvfb left behind.
    entered = threading.Event()
    go = threading.Event()
    stop_process = xvfb.DisplayManager._stop_process

    def held_stop(self, proc):
        entered.set()
        go.wait(DEADLINE)
        return stop_process(self, proc)

    monkeypatch.setattr(xvfb.DisplayManager, "_stop_process", held_stop)
    sup = supervisor_with(fast_config().replace('platform = "headless"', MANAGED))
    ready_pid(sup)
    xvfb_pid = only_player(sup).display.pid
    try:
        sup.delete_environment("demo")
        assert entered.wait(DEADLINE), "the managed Xvfb was not stopped"
        assert _answers_within(sup.describe, ANSWER_BOUND), "a status request waited for the Xvfb's stop"
        sup.request_stop()
        loop = _loop_thread()
        loop.join(0.5)
        assert loop.is_alive(), "the supervisor finished before the Xvfb's stop under way"
    finally:
        go.set()
    loop.join(DEADLINE)
    assert not loop.is_alive()
    assert pid_gone(xvfb_pid), "the managed Xvfb outlived the supervisor"


def test_a_player_released_cleanly_with_an_answer_on_its_way_is_not_handed_on_when_health_checks_are_on(
    supervisor_with,
):
    # A client drives the pipes by hand: it sends an action the player takes half a second to answer, does not read
    # the answer, and releases the lease cleanly (its pipes are empty: the player read the action). The next
    # lease request comes at once. Handed on, the player would give that client the late answer as its first.
    sup = supervisor_with(_health_config(60.0))
    pid = ready_pid(sup)
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    send_slow_action(answer["client_pipe"], 0.5, 7)
    assert sup.release(lease.id)["recycled"] is False  # (nothing unread or unsent: the release looks clean)
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        assert _step(answer, 1) == 1, "the next client got the late answer to the last client's action"
        assert answer["pid"] != pid
    finally:
        sup.release(lease.id)


def test_a_player_released_cleanly_with_nothing_on_its_way_serves_again_after_one_check(supervisor_with):
    # What renderd's own Session does: step, read the answer, release cleanly. The player answers the check sent
    # at the release and is leased again, not recycled.
    sup = supervisor_with(_health_config(60.0))
    pid = ready_pid(sup)
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    assert _step(answer, 1) == 1
    assert sup.release(lease.id)["recycled"] is False
    p = only_player(sup)
    with sup.lock:
        assert p.checks == 1, "no health check sent at the release"
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        assert answer["pid"] == pid
        with sup.lock:
            assert p.check_deadline is None and p.checks == 1
        assert _step(answer, 1) == 1
    finally:
        sup.release(lease.id)
    assert 'renderd_player_recycles_total{environment="demo"} 1.0' not in sup.metrics.render().decode()


@needs_xvfb
def test_a_managed_display_that_dies_just_before_a_spawn_is_replaced_without_the_lock(
    xvfb_spawner, supervisor_with, monkeypatch
):
    # The loop respawns a recycled player; its managed Xvfb dies right after the loop found it alive (the test
    # kills it at that moment). A new Xvfb (up to 15 s to start) must not be started with the supervisor's lock
    # held: every control request would wait for it. The player comes back on a new display.
    from renderd.platforms.base import Selection

    starts: list[tuple[str, bool]] = []  # (thread, whether it held the supervisor's lock) of each Xvfb start
    start = xvfb.DisplayManager._start

    def recording_start(self, *args, **kwargs):
        starts.append((threading.current_thread().name, sup.lock._is_owned()))
        return start(self, *args, **kwargs)

    monkeypatch.setattr(xvfb.DisplayManager, "_start", recording_start)
    armed = threading.Event()
    killed: list[int] = []
    display_dead = Selection.display_dead

    def dying_display(self):
        dead = display_dead(self)
        if not dead and armed.is_set() and threading.current_thread().name == "renderd-supervisor-test":
            armed.clear()
            killed.append(self.display.pid)
            os.kill(self.display.pid, signal.SIGKILL)
            wait_for(lambda: not self.display.alive(), DEADLINE, "the Xvfb to die")
        return dead

    monkeypatch.setattr(Selection, "display_dead", dying_display)
    sup = supervisor_with(fast_config().replace('platform = "headless"', MANAGED))
    pid = ready_pid(sup)
    first = only_player(sup).display
    starts.clear()
    armed.set()
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id, clean=False)  # recycled: respawned at once

    def on_a_new_display():
        with sup.lock:
            p = only_player(sup)
            return (p.state == State.READY and p.pid != pid and p.display is not None and p.display.alive()
                    and p.display.pid != first.pid)

    wait_for(on_a_new_display, DEADLINE, "the player READY on a new display")
    assert killed == [first.pid]
    assert starts and not [s for s in starts if s[1]], f"an Xvfb was started with the lock held: {starts}"


@needs_xvfb
def test_a_player_started_on_a_managed_display_that_died_before_it_was_ever_watched_is_restarted(
    xvfb_spawner, supervisor_with, monkeypatch
):
    # The first player of an environment is started on its new managed display, which dies (and is reaped) right
    # after the loop found it alive: the daemon never watched that Xvfb, so no pidfd reports its death. The
    # player must not stay on a dead display (READY, yet never leased: every lease request passes it over).
    from renderd.platforms.base import Selection

    killed: list[int] = []
    display_dead = Selection.display_dead

    def dying_display(self):
        dead = display_dead(self)
        if not dead and not killed and threading.current_thread().name == "renderd-supervisor-test":
            killed.append(self.display.pid)
            os.kill(self.display.pid, signal.SIGKILL)
            wait_for(lambda: not self.display.alive(), DEADLINE, "the Xvfb to die")  # (alive() reaps it)
        return dead

    monkeypatch.setattr(Selection, "display_dead", dying_display)
    sup = supervisor_with(fast_config().replace('platform = "headless"', MANAGED))

    def on_a_live_display():
        with sup.lock:
            p = only_player(sup)
            return (killed and p is not None and p.state == State.READY and p.display is not None
                    and p.display.alive())

    wait_for(on_a_live_display, DEADLINE, "the player READY on a live display")
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id)
    assert only_player(sup).display.pid != killed[0]


def test_the_players_of_the_configuration_start_at_the_loops_first_pass(supervisor_with, monkeypatch):
    # The environments of the file were added without waking the loop, so its first pass, which starts their
    # players, waited LOOP_IDLE (1 s) first: every daemon start was that much slower. With LOOP_IDLE far beyond
    # the deadline, the player must still be up in time.
    from renderd.daemon import supervisor as supervisor_mod

    monkeypatch.setattr(supervisor_mod, "LOOP_IDLE", 3600.0)
    sup = supervisor_with()
    wait_for(lambda: only_player(sup) is not None and only_player(sup).state == State.READY, DEADLINE,
             "the configured player READY without waiting out the loop's idle time")
