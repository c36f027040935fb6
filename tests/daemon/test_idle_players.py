"""An idle (READY) player must stay silent on ``server.pipe`` until a client sends it an action. One that closes
the pipe, or writes to it unasked, could only fail its next client's first step (end of file, or an answer to
an action nobody sent): the daemon notices at once, stops it and starts another."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.daemon.conftest import fast_config, wait_for

DEADLINE = 15.0
ODD_PLAYER = str(Path(__file__).with_name("odd_player.py"))


def _odd_config(idle: str) -> str:
    return fast_config(executable=f'["{sys.executable}", "{ODD_PLAYER}"]', extra=f'env = {{ODD_PLAYER_IDLE = "{idle}"}}')


def test_an_idle_player_that_closes_server_pipe_is_stopped_and_restarted(daemon):
    d = daemon(_odd_config("close"), ready=False)
    wait_for(lambda: re.search(r"demo\[0\] pid \d+ closed server.pipe while idle \(and it did not exit\)", d.output()),
             DEADLINE, "the daemon to notice the closed pipe")
    wait_for(lambda: "restarting in" in d.output(), DEADLINE, "a restart")
    (p,) = d.players()
    assert p["restarts"] >= 1, p
    assert "Traceback" not in d.output()


def test_an_idle_player_that_writes_unasked_is_recycled(daemon):
    d = daemon(_odd_config("chatter"), ready=False)
    recycled = re.compile(r"recycling demo\[0\] \(pid (\d+)\): it wrote \d+ byte\(s\) on server.pipe while idle")
    pids = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(set(recycled.findall(d.output()))),
                    DEADLINE, "two players recycled in turn")
    assert len(pids) >= 2
    assert "Traceback" not in d.output()
