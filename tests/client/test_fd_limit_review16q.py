"""launch() in a process at its open-file limit (RLIMIT_NOFILE): a clear error naming the limit, and nothing
left behind, not even the private pipe directory (which shutil.rmtree cannot remove without a descriptor)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.client.conftest import START

# Run in a child process of its own: the limit is the process's. After one launch (renderd's modules imported),
# for each `spare` it lowers RLIMIT_NOFILE to its lowest free descriptor number plus `spare` (launch() can open
# `spare` descriptors, then gets EMFILE: opening server.pipe, the log, /dev/null for the player...), launches,
# raises the limit again, and reports what the launch raised and what it left.
SCRIPT = r"""
import json, os, resource, sys, tempfile, time
import psutil
import renderd

tempfile.tempdir = sys.argv[1]
renderd.launch(width=16, height=16, platform="headless", start_timeout=30).close()


def target(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None  # (the listing's own descriptor)


outcomes = []
for spare in range(int(sys.argv[2])):
    before = set(os.listdir("/proc/self/fd"))
    low = os.dup(0)
    os.close(low)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low + spare, hard))
    try:
        session = renderd.launch(width=16, height=16, platform="headless", start_timeout=30)
    except Exception as exc:
        outcome = {"type": type(exc).__name__, "renderd": isinstance(exc, renderd.RenderdError), "message": str(exc)}
        del exc
    else:
        session.close()
        outcome = {"type": None}
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.monotonic() + 5
    while psutil.Process().children() and time.monotonic() < deadline:
        time.sleep(0.01)
    outcome["spare"] = spare
    outcome["children"] = [p.pid for p in psutil.Process().children()]
    outcome["fds"] = sorted(f"{fd} -> {target(fd)}" for fd in set(os.listdir("/proc/self/fd")) - before if target(fd))
    outcome["left"] = os.listdir(sys.argv[1])
    outcomes.append(outcome)
print(json.dumps(outcomes))
"""

#: Limits tried: no descriptor free, then one, two, three (server.pipe, the log, /dev/null, ... each fails in turn).
SPARES = 4


def test_launch_at_the_descriptor_limit_says_so_and_leaves_nothing(no_leaks, private_tmp):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(private_tmp), str(SPARES)],
        capture_output=True, text=True, timeout=START + 30,
    )
    assert done.returncode == 0, done.stderr
    for outcome in json.loads(done.stdout.splitlines()[-1]):
        assert outcome["type"] == "RenderdError" and outcome["renderd"], outcome
        assert "too many open files in this process" in outcome["message"], outcome
        assert "ulimit -n" in outcome["message"], outcome
        assert outcome["children"] == [] and outcome["fds"] == [], outcome
        assert outcome["left"] == [], f"launch() at the descriptor limit left {outcome['left']} behind: {outcome}"
