"""When an idle player's first health check goes out: ``health_interval`` after it came up, not at the
supervisor loop's next idle pass (up to a second later). Real supervisor, real reference player."""

from __future__ import annotations

import time

from renderd.daemon.supervisor import State
from tests.daemon.conftest import wait_for
from tests.helpers.health_review14e import DEADLINE, _config, _player


def test_the_first_check_goes_out_health_interval_after_the_player_came_up(supervisor_with):
    # The loop woke for the deadlines it knew; a READY player's first check was scheduled only at its next pass,
    # which an idle loop makes once a second (LOOP_IDLE): with health_interval = 0.2 the check went out about a
    # second after the player came up. No on_tick here: the loop's own timing is what is checked.
    sup = supervisor_with(_config(interval=0.2))
    wait_for(lambda: (p := _player(sup)) is not None and p.state == State.READY, DEADLINE, "a READY player")
    p = _player(sup)
    came_up = p.ready_at
    assert came_up is not None
    wait_for(lambda: p.checks >= 1, DEADLINE, "the first health check")
    sent = p.check_sent or time.monotonic()
    assert sent - came_up < 0.6, f"the first check went out {sent - came_up:.2f} s after the player came up"


def test_an_idle_loop_with_timed_checks_does_not_spin(supervisor_with):
    # (The pass that times a check must leave it timed: the loop then sleeps until the check is due.)
    passes: list[float] = []
    sup = supervisor_with(_config(interval=5.0), on_tick=lambda now: passes.append(now))
    wait_for(lambda: (p := _player(sup)) is not None and p.state == State.READY and p.check_due is not None,
             DEADLINE, "a READY player with its first check timed")
    before = len(passes)
    started = time.monotonic()
    time.sleep(1.0)  # (what is measured: how often the idle loop passes in about a second)
    window = time.monotonic() - started  # (longer on a busy machine: an idle loop then passes a little more)
    count = len(passes) - before
    # An idle loop passes about once a second (LOOP_IDLE), plus a few for a health check if the window reached it;
    # a spinning one passes thousands of times a second.
    assert count <= 5 + 2 * window, f"{count} loop passes in {window:.2f} s while idle"
