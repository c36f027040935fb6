"""The environment the daemon starts a player with."""

from __future__ import annotations

from tests.daemon.conftest import fast_config


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.partition(b"=") for item in f.read().split(b"\0") if item]
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


def test_a_headless_player_is_told_not_to_take_screenshots(daemon):
    # As renderd.launch and AI2-THOR's controller do when they pass -nographics: the daemon said True there.
    d = daemon(fast_config())
    (player,) = d.players()
    env = _environ(player["pid"])
    assert env["AI2THOR_SERVER_SIDE_SCREENSHOT"] == "False"
    with open(f"/proc/{player['pid']}/cmdline", "rb") as f:
        assert b"-nographics" in f.read().split(b"\0")
