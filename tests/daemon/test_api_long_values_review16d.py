"""Error answers quote what a request body held, cut short: a body is up to a megabyte, and an unknown key or a
wrong value of that size must not come back whole in the error (nor fill the client's log). Real daemon, requests
written by hand on its unix socket."""

from __future__ import annotations

import json
import os

from tests.daemon.conftest import fast_config
from tests.helpers.control_review14e import raw_request

#: Longest error message expected here: the message and a quoted piece of the value.
SHORT = 600


def _request(method: str, path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (b"%s %s HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (method.encode(), path.encode(), len(data), data))


def test_errors_about_a_request_body_quote_its_keys_and_values_cut_short(daemon):
    d = daemon(fast_config(instances=0))
    huge = "k" * 500_000
    pid = os.getpid()
    for method, path, body, says in [
        ("POST", "/v1/environments/demo/leases", {"client_pid": pid, huge: 1}, "unknown lease request key(s): 'kkk"),
        ("POST", "/v1/environments/demo/leases", {"client_pid": pid, **{f"k{i}": 1 for i in range(50)}},
         "and 40 more"),
        ("POST", "/v1/environments/demo/leases", {"client_pid": huge}, "got 'kkk"),
        ("POST", "/v1/environments/demo/leases", {"client_pid": pid, "timeout": huge}, "timeout must be a number"),
        ("POST", "/v1/environments/demo/leases", {"client_pid": pid, "timeout": 10 ** 4000}, "between 0 and 3600"),
        ("DELETE", "/v1/leases/" + "0" * 32, {huge: True}, "unknown release request key(s): 'kkk"),
        ("DELETE", "/v1/leases/" + "0" * 32, {"clean": huge}, "clean must be true or false, got 'kkk"),
    ]:
        status, _, answer = raw_request(d.socket, _request(method, path, body))
        message = json.loads(answer)["error"]["message"]
        assert status == 400 and says in message, (status, message[:300])
        assert len(message) < SHORT, (says, len(message), message[:300])
    # Short values are quoted whole, as before.
    status, _, answer = raw_request(d.socket, _request("DELETE", "/v1/leases/" + "0" * 32, {"clean": "yes"}))
    assert json.loads(answer)["error"]["message"] == "clean must be true or false, got 'yes'"
