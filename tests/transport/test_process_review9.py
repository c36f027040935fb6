"""The player process, review 9: what stop() finds to stop, and what a crash says about how the player died.
Real child processes; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import signal

import pytest

from renderd.process import PlayerProcess

from tests.helpers.leaks import pid_gone

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_helper_the_running_player_daemonised_is_stopped_with_it(tmp_path):
    # The classic daemonising helper: the player starts a child in a session of its own, which starts the
    # helper in the background and exits, so the helper is orphaned while the player still runs. It is in
    # no process group of the player's, and no longer the player's descendant: stop() must still end it.
    script = "setsid sh -c 'sleep 600 & echo helper $!'; echo started; sleep 600"
    log_path = tmp_path / "player.log"
    proc = PlayerProcess.spawn(["sh", "-c", script], None, log_path)
    helper_pid = None
    try:
        assert wait_until(lambda: "started" in log_path.read_text(), 30), log_path.read_text()
        helper_pid = int(log_path.read_text().split("helper ")[1].split()[0])
        assert os.getsid(helper_pid) != os.getsid(proc.pid) and os.getpgid(helper_pid) != proc.pgid
        proc.stop(1.0)
        assert wait_until(lambda: pid_gone(helper_pid), 10), "the daemonised helper outlived the player's stop()"
    finally:
        proc.stop(1.0)
        if helper_pid is not None and not pid_gone(helper_pid):
            os.kill(helper_pid, signal.SIGKILL)
