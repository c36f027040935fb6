"""A player's log file removed while it runs (a tmp cleaner): its crash still quotes the log's last lines, read through
a descriptor opened at the spawn that the player does not inherit and that closes with the session."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import renderd
from renderd.errors import PlayerCrashed
from tests.client.conftest import START, wait_for

SMALL = {"width": 16, "height": 16, "platform": "headless", "start_timeout": START, "step_timeout": START}


def test_a_crash_quotes_its_log_after_the_log_file_was_removed_while_the_player_ran(tmp_path):
    log = tmp_path / "player.log"
    with renderd.launch(**SMALL, log_path=log) as session:
        wait_for(lambda: log.exists() and log.stat().st_size > 0, START, "the player to write its log")
        log.unlink()  # (a tmp cleaner)
        with pytest.raises(PlayerCrashed) as info:
            session.step({"action": "RenderdFault", "fault": "abort"})
    assert info.value.log_tail.strip(), "the crash quotes nothing of the removed log"
    assert "abort" in info.value.log_tail.lower(), info.value.log_tail


def _log_readers(pid: int, log: str) -> list[int]:
    """The descriptors of process ``pid`` open for reading only on the file ``log``."""
    found = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") != log:
                continue
            info = Path(f"/proc/{pid}/fdinfo/{name}").read_text()
            flags = next(int(line.split()[1], 8) for line in info.splitlines() if line.startswith("flags:"))
        except (OSError, StopIteration):
            continue
        if flags & os.O_ACCMODE == os.O_RDONLY:
            found.append(int(name))
    return found


def test_the_log_reader_is_not_the_players_and_closes_with_the_session(tmp_path):
    log = str(tmp_path / "player.log")
    session = renderd.launch(**SMALL, log_path=log)
    try:
        assert stat.S_ISREG(os.stat(log).st_mode)
        assert len(_log_readers(os.getpid(), log)) == 1  # (one descriptor per player)
        assert _log_readers(session.pid, log) == []  # (not inherited)
    finally:
        session.close()
    assert _log_readers(os.getpid(), log) == []
