"""The control API and its client on a real daemon: release bodies, lease flows."""

from __future__ import annotations

import json
import os
import pathlib
import signal

import numpy as np
import pytest

from renderd.daemon.client import connect
from renderd.errors import ConfigError, LeaseError, PlayerCrashed

from tests.daemon.conftest import PLAYER, fast_config
from tests.helpers.control_review14e import run_renderd


def test_a_release_body_with_an_unknown_key_is_refused_and_the_lease_kept(daemon):
    # {"clen": false} (a typo of "clean") was taken as {} and released the lease cleanly: the player went
    # back to READY for the next client although its holder asked for it to be recycled.
    d = daemon(fast_config())
    c = d.client
    answer = c.lease("demo", timeout=10)
    path = "/v1/leases/" + answer["lease"]
    with pytest.raises(LeaseError) as caught:
        c.request("DELETE", path, {"clen": False})
    assert caught.value.status == 400
    assert "unknown release request key(s): clen" in str(caught.value)
    assert "clean" in str(caught.value)
    assert c.lease_status(answer["lease"])["ended"] is None  # nothing happened to the lease
    assert c.release(answer["lease"], clean=False) == {"released": True, "recycled": True}


def test_a_step_after_the_daemon_stopped_says_that_the_daemon_is_gone(daemon):
    # The daemon stops (systemctl stop) while its client is between steps: its lease ends and its player
    # stops. The next step said "its exit status is unknown to the client: see `renderd status` or the
    # daemon's log", as if the daemon could still tell; it says that the daemon is no longer running.
    d = daemon(fast_config())
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.step("Pass").sequence_id == 1
        d.signal(signal.SIGTERM)
        assert d.wait_exit() == 0, d.output()
        with pytest.raises(PlayerCrashed) as info:
            session.step("Pass")
    message = str(info.value)
    assert f"the renderd daemon at {d.socket} is no longer running" in message, message
    assert "unknown to the client" not in message and "renderd status" not in message, message


def test_a_lease_timeout_computed_with_numpy_is_a_number_of_seconds(daemon):
    # ControlClient.lease() took only int and float: a timeout of numpy's (np.int64(5), np.float32(2.5)),
    # which renderd.connect() and the configuration take, was "must be a number of seconds".
    d = daemon(fast_config())
    c = d.client
    for timeout in (np.int64(5), np.float32(2.5)):
        answer = c.lease("demo", timeout=timeout)
        assert c.release(answer["lease"]) == {"released": True, "recycled": False}
    with pytest.raises(ValueError, match="must be a number of seconds, 0 or more"):
        c.lease("demo", timeout=np.float64("nan"))


def test_status_json_is_the_form_docs_api_md_gives_and_nothing_when_the_daemon_is_down(daemon):
    # `renderd status --json` is for scripts, and docs/api.md, which describes every answer it is made of,
    # did not say what it prints.
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    assert '`renderd status --json` prints `{"daemon": HEALTH, "environments": [ENV, ...]}`' in doc
    d = daemon(fast_config())
    result = run_renderd("status", "--socket", d.socket, "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert sorted(printed) == ["daemon", "environments"]
    assert printed["daemon"]["status"] == "ready" and printed["daemon"]["pid"] == d.pid
    assert [env["name"] for env in printed["environments"]] == ["demo"]
    assert printed["environments"][0]["players"][0]["state"] == "READY"
    gone = str(d.base / "gone.sock")
    result = run_renderd("status", "--socket", gone, "--json")
    assert (result.returncode, result.stdout) == (1, b""), result
    assert result.stderr.startswith(f"Error: cannot reach the renderd daemon at {gone}"), result.stderr


def test_a_put_naming_its_executable_by_a_relative_path_is_refused(daemon):
    # A relative path in a PUT body was taken from the daemon's working directory, which is not the client's
    # (a service's is /): the program run was whatever that path named there, or "does not exist" for a
    # file the client has.
    d = daemon(fast_config(instances=0))
    relative = os.path.relpath(PLAYER)  # (the daemon's working directory is this process's)
    for executable in (relative, [relative, "--static-frame"]):
        with pytest.raises(ConfigError) as info:
            d.client.request("PUT", "/v1/environments/rel", {"executable": executable, "platform": "headless"})
        assert info.value.status == 400
        message = str(info.value)
        assert f"environments.rel.executable: {relative!r} is a relative path" in message, message
        assert "give an absolute path" in message, message
    assert [env["name"] for env in d.environments()] == ["demo"]
    # A bare name is looked up as in a configuration file.
    status, _ = d.client.request("PUT", "/v1/environments/rel", {"executable": "renderd-player", "instances": 0})
    assert status == 201
