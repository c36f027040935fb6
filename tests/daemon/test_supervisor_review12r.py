"""A reload that lowers max_boot_failures and, in the same file, changes the environment whose player failed to
boot: the failures were the previous configuration's; the new one is started, not given up. Real players, real
FIFOs: an in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``)."""

from __future__ import annotations

import os
import threading

from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE
from tests.helpers.reload_review14e import _config


def test_a_reload_that_fixes_the_environment_and_lowers_max_boot_failures_starts_the_fix(supervisor_with):
    bad = (fast_config(executable='["/bin/sh", "-c", "echo bad build; exit 3"]')
           .replace("backoff_initial = 0.05", "backoff_initial = 30.0").replace("backoff_max = 0.2", "backoff_max = 60.0")
           .replace("max_boot_failures = 3", "max_boot_failures = 5"))
    sup = supervisor_with(bad)

    def slot():
        with sup.lock:
            players = sup.environments["demo"].players
            assert len(players) <= 1, players
            return (players[0].state.value, players[0].boot_failures) if players else (None, 0)

    wait_for(lambda: slot() == ("BACKOFF", 1), DEADLINE, "the first boot failure (then a 30 s backoff)")
    outcome: list[object] = []

    def lease() -> None:
        try:
            outcome.append(sup.acquire("demo", os.getpid(), DEADLINE)[0])
        except Exception as exc:  # (the outcome is checked below)
            outcome.append(exc)

    waiter = threading.Thread(target=lease)
    waiter.start()
    try:
        wait_for(lambda: len(sup.environments["demo"].waiters) == 1, DEADLINE, "the lease request waiting")
        # The fixed build (the reference player), and a lower limit: its one failure was the bad build's.
        fixed = fast_config().replace("backoff_initial = 0.05", "backoff_initial = 30.0").replace(
            "backoff_max = 0.2", "backoff_max = 60.0").replace("max_boot_failures = 3", "max_boot_failures = 1")
        assert sup.reload(_config(fixed))
        # Before: FAILED at once by the bad build's failure (logged "giving up"), and the waiting request refused
        # ("every player failed to start"), although the loop then started the fixed build.
        assert slot()[0] != "FAILED"
        waiter.join(DEADLINE)
        assert not waiter.is_alive()
        (leased,) = outcome
        assert not isinstance(leased, Exception), leased
        sup.release(leased.id)
    finally:
        waiter.join(DEADLINE)
