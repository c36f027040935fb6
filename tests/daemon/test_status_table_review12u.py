"""renderd status's table: players still on the previous configuration during a rollout are marked."""

from __future__ import annotations

from renderd.daemon.commands import format_status


def _player(index: int, state: str, outdated: bool) -> dict:
    return {"index": index, "state": state, "pid": 100 + index, "uptime": 5.0, "restarts": 0, "reason": "",
            "lease": None, "outdated": outdated}


def test_players_on_the_previous_configuration_are_marked():
    health = {"version": "0.1.0", "pid": 42, "status": "ready", "uptime": 60.0}
    envs = [{"name": "demo", "removing": False, "wanted": 2,
             "players": [_player(0, "READY", True), _player(1, "READY", False)]}]
    lines = format_status(health, envs).splitlines()
    assert lines[2].split()[:4] == ["demo", "0", "READY*", "100"], lines
    assert lines[3].split()[:4] == ["demo", "1", "READY", "101"], lines
    assert lines[-1] == "* still on the previous configuration: a rollout of the new one is under way", lines
    # No rollout under way: no mark, no note (and an answer without the key, from an older daemon, is read).
    envs[0]["players"][0]["outdated"] = False
    del envs[0]["players"][1]["outdated"]
    text = format_status(health, envs)
    assert "*" not in text and "previous configuration" not in text, text
