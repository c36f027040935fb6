"""``launch_many`` whose VectorSession cannot be made once its players run (the process is out of descriptors for
the poll's wake-up eventfd: EMFILE) closes every player it started and stops its launch threads before the error
goes on. They kept running for as long as the error was held (a caller's ``except`` clause, a retry loop, a test's
``pytest.raises``), with the launch threads keeping them alive."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import psutil

from tests.helpers.leaks import pid_gone, wait_for
from tests.vector.conftest import GONE_TIMEOUT, START_TIMEOUT, SIZE

# In a child python, so that its descriptor limit can be lowered: once _open_all has launched the players (real ones,
# on real pipes), the soft RLIMIT_NOFILE is set to the lowest free descriptor number, so the VectorSession's
# os.eventfd finds none free. The error is kept while the child looks at what is left.
CHILD = textwrap.dedent("""
    import errno, json, os, resource, sys, threading, traceback
    import psutil
    import renderd
    import renderd.vector as rv

    pids, limits = [], []
    real_open_all = rv._open_all

    def open_all(*args, **kwargs):
        sessions = real_open_all(*args, **kwargs)
        pids.extend(s.pid for s in sessions)
        lowest = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limits.append((soft, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
        return sessions

    rv._open_all = open_all
    held = None
    try:
        renderd.launch_many(2, width={size}, height={size}, args=["--static-frame"], start_timeout={start})
    except OSError as exc:
        held = exc  # (kept, as a caller's except clause or a retry loop keeps it)
    resource.setrlimit(resource.RLIMIT_NOFILE, limits[0])

    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    print(json.dumps({{
        "errno": getattr(held, "errno", None),
        "raised_in": traceback.extract_tb(held.__traceback__)[-1].name if held is not None else None,
        "pids": pids,
        "running": [pid for pid in pids if running(pid)],
        "children": [p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE],
        "threads": [t.name for t in threading.enumerate() if t.name.startswith("renderd-vector")],
    }}))
    sys.stdout.flush()
    held = None  # (the old code's half-made VectorSession closes them as it is collected)
""").format(size=SIZE, start=START_TIMEOUT)


def test_players_are_closed_when_the_vector_session_cannot_be_made(no_leaks):
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    try:
        assert report["errno"] == 24 and report["raised_in"] == "_ensure_wake_fd", (report, child.stderr)
        assert len(report["pids"]) == 2
        assert report["running"] == [] and report["children"] == [], (
            f"players left running after launch_many raised: {report}"
        )
        assert report["threads"] == [], f"launch threads left: {report}"
    finally:
        for pid in report["pids"]:  # (none may outlive the child either way)
            wait_for(lambda: pid_gone(pid), GONE_TIMEOUT, f"player pid {pid} to be gone")
