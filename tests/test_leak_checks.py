"""The shared leak checks (tests/helpers/leaks.py) catch what they are for: each kind of leftover fails."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from tests.helpers.leaks import Leaks


def test_nothing_left_passes():
    Leaks().check(timeout=0.1)


def test_an_open_descriptor_fails():
    leaks = Leaks()
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(AssertionError, match="file descriptors left open: .*/dev/null"):
            leaks.check(timeout=0.1)
    finally:
        os.close(fd)


def test_a_child_process_fails_and_is_killed():
    leaks = Leaks()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(AssertionError, match=f"processes left: .*{proc.pid}"):
        leaks.check(timeout=0.1)
    assert proc.wait(timeout=10) == -9  # killed by the check, so it cannot spill into the next test


def test_a_thread_and_a_runtime_file_fail(tmp_path):
    leaks = Leaks(tmp_path, threads=True)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="leaked-thread")
    thread.start()
    try:
        with pytest.raises(AssertionError, match="leaked-thread"):
            leaks.check(timeout=0.1)
    finally:
        stop.set()
        thread.join()
    (tmp_path / "pipes").mkdir()
    with pytest.raises(AssertionError, match=r"left in the runtime directory: \['pipes'\]"):
        leaks.check(timeout=0.1)
