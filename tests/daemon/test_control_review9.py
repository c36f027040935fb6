"""The control API on a real daemon: whose process a lease request's ``client_pid`` is, and a client in a pid
namespace of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from renderd.errors import LeaseError
from tests.daemon.conftest import PLAYER, fast_config, pid_gone, wait_for

#: Deadline for a client process of these tests to say what it did.
CLIENT_TIMEOUT = 20.0

#: A client that leases a player and waits to be killed; it prints its pid as its own pid namespace numbers it
#: (what it sends as client_pid), then its pid as /proc (the daemon's namespace) numbers it, then the lease.
NAMESPACED_CLIENT = r"""
import json, os, sys
from renderd.daemon.client import ControlClient
print(os.getpid(), int(os.readlink("/proc/self")), flush=True)
answer = ControlClient(sys.argv[1]).lease("demo", timeout=10)
print(json.dumps(answer), flush=True)
sys.stdin.read()
"""


#: A client with a session, as in a container: its own pid namespace and its own /proc, where the player's pid
#: names no process (or another one). It prints what each step gave, as JSON lines.
CONTAINED_CLIENT = r"""
import json, sys
import renderd
from renderd.errors import PlayerCrashed
with renderd.connect("demo", socket=sys.argv[1], timeout=10) as session:
    event = session.step({"action": "RenderdFault", "fault": "sleep", "seconds": 0.3})  # longer than a pid poll
    print(json.dumps({"step": event.metadata["lastAction"]}), flush=True)
    try:
        session.step({"action": "RenderdFault", "fault": "exit", "code": 3})
    except PlayerCrashed as exc:
        print(json.dumps({"crashed": exc.returncode, "message": str(exc).splitlines()[0]}), flush=True)
"""


def _unshare_pid(*options: str) -> list[str]:
    """The command prefix that runs a program as pid 1 of a new pid namespace (skips the test when that is not
    permitted here)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux) here")
    probe = subprocess.run(["unshare", "--pid", "--fork", *options, "true"], capture_output=True,
                           timeout=CLIENT_TIMEOUT)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode(errors='replace').strip()}")
    return ["unshare", "--pid", "--fork", *options, "--kill-child"]


def test_a_client_in_another_pid_namespace_gets_its_own_process_watched(daemon):
    # The client sends the pid its own namespace gives it (1): the daemon watched the process numbered 1 in
    # its own namespace instead (init), so the lease outlived the client for ever.
    d = daemon(fast_config())
    client = subprocess.Popen([*_unshare_pid(), sys.executable, "-c", NAMESPACED_CLIENT, d.socket],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    real_pid = None
    try:
        own_pid, real_pid = map(int, client.stdout.readline().split())
        assert own_pid == 1 and real_pid != 1
        answer = json.loads(client.stdout.readline())
        (player,) = d.players()
        assert player["state"] == "LEASED" and player["lease"]["client_pid"] == real_pid
        os.kill(real_pid, signal.SIGKILL)
        client.wait(CLIENT_TIMEOUT)
        d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != answer["pid"],
                       what="the player recycled after its client died")
        assert d.client.lease_status(answer["lease"])["ended"] == "client_exited"
    finally:
        if client.poll() is None:
            if real_pid:
                os.kill(real_pid, signal.SIGKILL)
            client.kill()
            client.wait(CLIENT_TIMEOUT)
        client.stdin.close()
        client.stdout.close()


def test_a_client_pid_unrelated_to_the_asking_process_is_refused(daemon):
    # Any pid of a running process was taken on trust: the daemon watched that process, ended the lease when it
    # exited (or never), whatever the client holding the lease did.
    d = daemon(fast_config())
    orphan = subprocess.run(["sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & echo $!"], capture_output=True,
                            text=True, timeout=CLIENT_TIMEOUT)
    unrelated = int(orphan.stdout)  # (its parent exited: neither this process's ancestor nor descendant)
    try:
        with pytest.raises(LeaseError) as info:
            d.client.request("POST", "/v1/environments/demo/leases", {"client_pid": unrelated, "timeout": 5})
        assert info.value.status == 400
        assert f"client_pid {unrelated} is neither the process asking for the lease (pid {os.getpid()})" in str(
            info.value)
        # Nor init: an ancestor of every process, which never exits (the lease would never end with its client).
        with pytest.raises(LeaseError) as info:
            d.client.request("POST", "/v1/environments/demo/leases", {"client_pid": 1, "timeout": 5})
        assert info.value.status == 400 and "client_pid 1 is neither the process asking" in str(info.value)
        assert d.players()[0]["state"] == "READY"
    finally:
        os.kill(unrelated, signal.SIGKILL)
        wait_for(lambda: pid_gone(unrelated), CLIENT_TIMEOUT, "the orphan sleep to end")
    # The asking process's parent (a script whose `curl` asks for the lease names the script) is its client.
    script = ("import json, os, sys\nfrom renderd.daemon.client import ControlClient\n"
              "c = ControlClient(sys.argv[1])\n"
              "print(json.dumps(c.request('POST', '/v1/environments/demo/leases', "
              "{'client_pid': os.getppid(), 'timeout': 10})[1]))\n")
    out = subprocess.run([sys.executable, "-c", script, d.socket], capture_output=True, text=True,
                         timeout=CLIENT_TIMEOUT)
    lease = json.loads(out.stdout)
    (player,) = d.players()
    assert player["state"] == "LEASED" and player["lease"]["client_pid"] == os.getpid()
    d.client.release(lease["lease"])


def test_a_session_in_a_pid_namespace_of_its_own_is_not_told_its_player_crashed(daemon):
    # The session watched the player by the pid the daemon gave, which in the client's namespace is no process
    # (or another one): the first step that took longer than a poll of that pid raised PlayerCrashed ("it has
    # exited") while the player was answering.
    d = daemon(fast_config())
    client = subprocess.run([*_unshare_pid("--mount-proc"), sys.executable, "-c", CONTAINED_CLIENT, d.socket],
                            capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    lines = [json.loads(line) for line in client.stdout.splitlines()]
    assert lines and lines[0] == {"step": "RenderdFault"}, client.stderr[-2000:]
    # The player's real end still shows (end of file on its pipe), with its exit status from the daemon.
    assert lines[1]["crashed"] == 3 and "exit code 3" in lines[1]["message"], lines


def test_the_metrics_of_an_environment_that_is_gone_are_dropped_after_a_while(daemon):
    # Every series of an environment stayed in the daemon's registry and in every scrape for as long as the
    # daemon ran: a daemon whose clients PUT and DELETE environments of new names grew without end, and
    # dashboards kept showing environments that no longer exist.
    d = daemon(fast_config(), preamble="import renderd.daemon.metrics as m; m.GONE_SERIES_TTL = 0.5")
    body = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "start_timeout": 20.0}
    d.client.request("PUT", "/v1/environments/brief", body)
    lease = d.client.lease("brief", timeout=20)
    d.client.release(lease["lease"])
    d.client.request("DELETE", "/v1/environments/brief")
    wait_for(lambda: all(e["name"] != "brief" for e in d.environments()), CLIENT_TIMEOUT, "the environment gone")
    # The scrapes right after it went still see how it ended ...
    metrics = d.client.request("GET", "/metrics")[1]
    assert 'renderd_leases_total{environment="brief"} 1.0' in metrics
    assert 'renderd_lease_ends_total{environment="brief",how="released"} 1.0' in metrics
    # ... and once GONE_SERIES_TTL has passed, its series are dropped, the others' kept.
    metrics = wait_for(lambda: (lambda text: text if 'environment="brief"' not in text else None)(
        d.client.request("GET", "/metrics")[1]), CLIENT_TIMEOUT, "the series of the environment gone dropped")
    assert 'renderd_leases_total{environment="demo"} 0.0' in metrics
    # Declared again, it starts from zero.
    d.client.request("PUT", "/v1/environments/brief", body)
    assert 'renderd_leases_total{environment="brief"} 0.0' in d.client.request("GET", "/metrics")[1]
