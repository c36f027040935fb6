"""A session dropped without close() is stopped, with a ResourceWarning that names its player (pid, executable), as
an unclosed file or subprocess.Popen warns; a closed one gives none."""

from __future__ import annotations

import gc
import warnings

import psutil

import renderd
from tests.client.conftest import START, wait_for

SMALL = {"width": 16, "height": 16, "platform": "headless", "start_timeout": START, "step_timeout": START}


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_session_dropped_unclosed_warns_naming_its_player_and_stops_it():
    session = renderd.launch(**SMALL)
    pid = session.pid
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del session
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(unclosed) == 1, [str(w.message) for w in caught]
    message = str(unclosed[0].message)
    assert "unclosed renderd session" in message and f"pid {pid}" in message and "renderd-player" in message, message
    wait_for(lambda: _gone(pid), START, "the dropped session's player stopped")


def test_a_closed_session_dropped_gives_no_warning():
    session = renderd.launch(**SMALL)
    session.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del session
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
