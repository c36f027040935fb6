"""renderd status's table marks a player the environment no longer wants (scaled down while it was leased or
starting): it goes once its lease ends, as the API's ``retiring`` says."""

from __future__ import annotations

from renderd.daemon.commands import format_status

HEALTH = {"version": "0.1.0", "pid": 42, "status": "ready", "uptime": 60.0}


def _player(index: int, state: str, **more) -> dict:
    player = {"index": index, "state": state, "pid": 100 + index, "uptime": 5.0, "restarts": 0, "reason": "",
              "lease": None}
    player.update(more)
    return player


def test_a_retiring_player_is_marked():
    lease = {"client_pid": 7, "duration": 3.0}
    envs = [{"name": "demo", "removing": False, "wanted": 1, "players": [
        _player(0, "READY", retiring=False), _player(1, "LEASED", retiring=True, lease=lease),
        _player(2, "STOPPING", retiring=True), _player(3, "LEASED", lease=lease)]}]
    rows = format_status(HEALTH, envs).splitlines()[2:6]
    assert "retiring" not in rows[0] and "retiring" not in rows[3], rows  # (an older daemon's answer lacks the key)
    assert rows[1].startswith("demo") and " LEASED (retiring) " in rows[1], rows
    assert "retiring" not in rows[2], rows  # (stopping: going already)
