"""A VectorSession dropped without close(): its players are stopped, with one ResourceWarning that names them (none
from its slots' sessions, which it closes)."""

from __future__ import annotations

import gc
import warnings

import psutil

import renderd
from tests.vector.conftest import GONE_TIMEOUT, player_kwargs, wait_for


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_vector_session_dropped_unclosed_warns_once_naming_its_players_and_stops_them():
    vs = renderd.launch_many(2, **player_kwargs())
    pids = [s.pid for s in vs.sessions]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del vs
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(unclosed) == 1, unclosed
    assert "unclosed renderd VectorSession of 2 players" in unclosed[0], unclosed
    assert all(f"pid {pid}" in unclosed[0] for pid in pids), unclosed
    wait_for(lambda: all(_gone(pid) for pid in pids), GONE_TIMEOUT, "the dropped vector session's players stopped")


def test_a_closed_vector_session_dropped_gives_no_warning():
    vs = renderd.launch_many(2, **player_kwargs())
    vs.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del vs
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
