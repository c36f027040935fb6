"""A tmp cleaner (systemd-tmpfiles, tmpreaper) removes what the daemon keeps in its runtime directory while it runs:
its players' pipe directory, its log directory, the named pipes of a running player. No player slot is lost for it
(none ends FAILED, and no lease is granted on a player whose pipes are gone), and the daemon says what happened.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
from pathlib import Path

from renderd.daemon.client import connect
from tests.daemon.conftest import fast_config, wait_for

DEADLINE = 20.0


def _ready_pids(d, n: int) -> list[int]:
    players = d.wait_players(lambda ps: len(ps) == n and all(p["state"] == "READY" for p in ps),
                             timeout=DEADLINE, what=f"{n} READY players")
    return [p["pid"] for p in players]


def test_players_and_logs_directories_removed_while_running_are_made_again_at_the_next_start(daemon):
    d = daemon(fast_config(instances=2))
    old = _ready_pids(d, 2)
    run = Path(d.runtime_dir)
    shutil.rmtree(run / "players")
    shutil.rmtree(run / "logs")
    for pid in old:
        os.kill(pid, signal.SIGKILL)

    def back() -> bool:
        ps = d.players()
        assert not any(p["state"] == "FAILED" for p in ps), (ps, d.output())
        return len(ps) == 2 and all(p["state"] == "READY" and p["pid"] not in old for p in ps)

    wait_for(back, DEADLINE, "both players restarted and READY")
    for name in ("players", "logs"):
        st = os.stat(run / name)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid(), (name, oct(st.st_mode))
    assert sorted(os.listdir(run / "logs")) == ["demo.0.log", "demo.1.log"]
    out = d.output()
    assert "the players' pipe directory" in out and "was removed while the daemon ran" in out, out
    assert "the players' log directory" in out, out
    with connect("demo", socket=d.socket, timeout=DEADLINE) as session:
        assert session.step({"action": "Pass"}).metadata["lastActionSuccess"]


def test_a_player_whose_pipes_were_unlinked_is_recycled_not_leased(daemon):
    d = daemon(fast_config(instances=1))
    [old] = _ready_pids(d, 1)
    pipes = [p for p in (Path(d.runtime_dir) / "players").glob("demo.0.*/*.pipe")]
    assert len(pipes) == 2, pipes
    for pipe in pipes:
        pipe.unlink()
    # Before, the lease was granted on it and connect() failed: "its pipes could not be opened ... ENOENT".
    with connect("demo", socket=d.socket, timeout=DEADLINE) as session:
        assert session.step({"action": "Pass"}).metadata["lastActionSuccess"]
        assert session.channel.player.pid != old
    out = d.output()
    assert f"recycling demo[0] (pid {old}): its named pipes" in out and "removed or replaced" in out, out
    wait_for(lambda: not os.path.exists(pipes[0].parent), DEADLINE, "the old pipe directory removed")


def test_a_start_that_cannot_make_its_log_directory_says_why_each_time_and_a_reload_mends_the_failed_slot(daemon):
    d = daemon(fast_config(instances=1))
    [old] = _ready_pids(d, 1)
    logs = Path(d.runtime_dir) / "logs"
    shutil.rmtree(logs)
    logs.write_text("not a directory\n")  # what a cleaner's race, or a mistaken hand, can leave
    os.kill(old, signal.SIGKILL)
    d.wait_players(lambda ps: ps[0]["state"] == "FAILED", timeout=DEADLINE, what="the player FAILED")
    out = d.output()
    # Every failed start is logged with its reason, not only the last one with the FAILED line.
    assert out.count("demo[0] failed to start: the players' log directory") == 3, out
    assert "something else is there now" in out, out
    logs.unlink()
    d.signal(signal.SIGHUP)  # the reload retries the FAILED player
    wait_for(lambda: d.players()[0]["state"] == "READY", DEADLINE, "the player READY after the reload")
    assert logs.is_dir()


def test_a_crash_whose_log_file_was_removed_while_it_ran_says_so(daemon):
    d = daemon(fast_config(instances=1))
    [player] = d.wait_players(lambda ps: ps[0]["state"] == "READY", timeout=DEADLINE, what="the player READY")
    Path(player["log"]).unlink()
    os.kill(player["pid"], signal.SIGABRT)
    wait_for(lambda: f"demo[0] pid {player['pid']} exited" in d.output(), DEADLINE, "the crash logged")
    out = d.output()
    # Before, the line said only "killed by SIGABRT", and the log it pointed to (made again by the next start)
    # held nothing of that run. The daemon keeps each player's log open, so its last line is quoted all the same.
    line = re.search(rf"demo\[0\] pid {player['pid']} exited: killed by SIGABRT; last log line: (.+); its log file "
                     rf"{re.escape(player['log'])} was removed while it ran \(quoted from the file it had open\)", out)
    assert line is not None and line[1].strip(), out
