"""The daemon's health report against a wall clock that jumps."""

from __future__ import annotations

import textwrap
import time

from renderd.config import loads
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import Supervisor
from tests.daemon.conftest import fast_config


def test_health_uptime_does_not_follow_the_wall_clock(tmp_path, monkeypatch):
    # The wall clock is set back (NTP stepping it, an operator's `date -s`): the daemon has still been up
    # for as long as it has, never a negative time, and stepping it forward adds nothing.
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    sup = Supervisor(loads(textwrap.dedent(fast_config(instances=0))), players_dir=str(tmp_path / "players"),
                     log_dir=str(tmp_path / "logs"), platforms=_Platforms())
    try:
        wall = time.time
        for jump in (-3600.0, 86400.0):
            monkeypatch.setattr(time, "time", lambda jump=jump: wall() + jump)
            uptime = sup.health()["uptime"]
            assert 0 <= uptime < 60, (jump, uptime)
    finally:
        monkeypatch.undo()
        sup.close()
