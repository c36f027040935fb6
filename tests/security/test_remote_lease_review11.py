"""Leases are granted on the control socket only: over the HTTP listener the daemon cannot know the client
process, and the players' pipes are files on its host."""

from __future__ import annotations

import json
import os

from tests.helpers.http_control_review14e import call, control_token


def test_a_lease_request_over_the_http_listener_is_refused_and_leases_nothing(secure_daemon) -> None:
    # Over TCP there is no peer credential: a lease request's client_pid was taken as given, so a lease for
    # pid 1 (init, which never exits), or for any unrelated process of the host, held a player until that
    # process exited. It is now refused, saying where leases are granted; no player is leased.
    d = secure_daemon
    token = control_token(d)
    for client_pid in (1, os.getpid()):
        status, headers, body = call(d, "POST", "/v1/environments/demo/leases", token=token,
                                     body={"client_pid": client_pid, "timeout": 5})
        error = json.loads(body)["error"]
        assert status == 403 and headers["content-type"] == "application/json", (status, body)
        assert error["type"] == "LeaseError"
        assert "control socket" in error["message"] and d.socket in error["message"]
    status, _, body = call(d, "GET", "/v1/environments/demo", token=token)
    assert status == 200
    assert all(p["lease"] is None for p in json.loads(body)["players"])
