"""die_with_parent(): the preexec_fn every child renderd starts gets (players, probes, GPU tools, Xvfb)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from renderd.process import die_with_parent


def test_a_child_whose_parent_is_already_gone_exits_before_exec(tmp_path):
    # The parent "died" (the pid given is not the child's parent): the child must end before exec, even
    # with a Python SIGTERM handler inherited from this process, which a SIGTERM sent to itself would run
    # instead (and then exec the program anyway).
    marker = tmp_path / "ran"
    ran_handler = tmp_path / "handler"
    previous = signal.signal(signal.SIGTERM, lambda *_: ran_handler.write_text("x"))
    try:
        result = subprocess.run(
            [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"],
            preexec_fn=die_with_parent(os.getpid() + 1_000_000, signal.SIGTERM),
            timeout=30,
            check=False,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.returncode == 1
    assert not marker.exists() and not ran_handler.exists()


def test_a_child_of_a_living_parent_runs():
    result = subprocess.run([sys.executable, "-c", "print('ok')"], preexec_fn=die_with_parent(os.getpid()),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and result.stdout == "ok\n"
