"""Review 13a: the display manager keeps a start lock per (geometry, Xvfb environment) only while callers of
acquire() hold it or wait for it, so a long-running daemon whose environments change on reloads does not keep one
per key it ever saw; and dropping them never lets two callers start two servers for one key. Real Xvfb (a shell
wrapper in front of it where a start must fail or wait)."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from renderd.errors import PlatformError
from renderd.platforms.xvfb import DisplayManager, xvfb_environment

from .conftest import wait_until

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

DEADLINE = 15.0


def _wrapper(tmp_path, body: str) -> str:
    path = tmp_path / "Xvfb"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def _callers(manager: DisplayManager, width: int, height: int, env: dict[str, str]) -> int:
    """How many callers hold or wait for the start lock of that key (0: it has none)."""
    with manager._lock:
        entry = manager._start_locks.get((width, height, 1, xvfb_environment(env)))
        return 0 if entry is None else entry.callers


def test_no_start_lock_is_kept_once_its_callers_are_done(xvfb, tmp_path):
    base = {k: v for k, v in os.environ.items() if k != "LP_NUM_THREADS"}
    manager = DisplayManager()
    try:
        displays = [manager.acquire(67, 43, env={**base, "LP_NUM_THREADS": str(n)}) for n in (1, 2)]
        displays.append(manager.acquire(67, 43, env={**base, "LP_NUM_THREADS": "1"}))  # (shares the first)
        assert len({d.pid for d in displays}) == 2
        assert manager._start_locks == {}  # (servers run, but no caller is starting one)
        for display in displays:
            display.release()
        assert manager.displays() == []
        assert manager._start_locks == {}
    finally:
        manager.shutdown()
    # A start that fails lets its lock go as well.
    failing = DisplayManager(xvfb=_wrapper(tmp_path, "exit 1"))
    try:
        with pytest.raises(PlatformError, match="without a display number"):
            failing.acquire(67, 43)
        assert failing._start_locks == {}
    finally:
        failing.shutdown()


def test_callers_waiting_for_a_start_that_fails_start_one_server_between_them(xvfb, tmp_path):
    # The first start fails while a second caller waits for its lock; the second then starts a server, and a third
    # caller that comes meanwhile waits for that start and shares its server: the lock is not dropped while the
    # second still uses it, so the third cannot start a server of its own.
    real = shutil.which("Xvfb")
    calls = tmp_path / "calls"
    calls.mkdir()
    binary = _wrapper(
        tmp_path,
        f'n=$(ls "{calls}" | wc -l); touch "{calls}/$n"\n'
        f'if [ "$n" = 0 ]; then while [ ! -e "{tmp_path}/fail" ]; do sleep 0.01; done; exit 1; fi\n'
        f'while [ ! -e "{tmp_path}/go" ]; do sleep 0.01; done\n'
        f'exec {real} "$@"',
    )
    manager = DisplayManager(xvfb=binary, start_timeout=DEADLINE)
    env = dict(os.environ)
    results: dict[str, object] = {}

    def caller(name: str) -> None:
        try:
            results[name] = manager.acquire(71, 41, env=env)
        except BaseException as exc:
            results[name] = exc

    threads = {name: threading.Thread(target=caller, args=(name,)) for name in ("first", "second", "third")}
    try:
        threads["first"].start()
        assert wait_until(lambda: (calls / "0").exists(), DEADLINE)
        threads["second"].start()
        assert wait_until(lambda: _callers(manager, 71, 41, env) == 2, DEADLINE)
        (tmp_path / "fail").touch()
        threads["first"].join(DEADLINE)
        assert isinstance(results.get("first"), PlatformError), results
        assert wait_until(lambda: (calls / "1").exists(), DEADLINE)  # the second caller is starting its server
        threads["third"].start()
        assert wait_until(lambda: _callers(manager, 71, 41, env) == 2, DEADLINE)
        (tmp_path / "go").touch()
        for name in ("second", "third"):
            threads[name].join(DEADLINE)
        second, third = results["second"], results["third"]
        assert not isinstance(second, BaseException) and not isinstance(third, BaseException), results
        assert second.pid == third.pid and second.alive()
        assert sorted(os.listdir(calls)) == ["0", "1"]  # two starts: the one that failed, and one server
        assert manager._start_locks == {}
        second.release()
        third.release()
        assert manager.displays() == []
    finally:
        (tmp_path / "fail").touch()
        (tmp_path / "go").touch()
        for t in threads.values():
            if t.ident is not None:
                t.join(DEADLINE)
        manager.shutdown()
