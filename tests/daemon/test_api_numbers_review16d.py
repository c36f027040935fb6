"""Request bodies with numbers JSON allows and Python cannot read: an integer of more digits than Python turns into
a number (4300, ``sys.get_int_max_str_digits()``) is valid JSON, so the 400 says what is wrong with it rather
than calling the body "not UTF-8 JSON" and advising the client to change the daemon's interpreter. Real daemon,
requests written by hand on its unix socket."""

from __future__ import annotations

import json
import os
import sys

from tests.daemon.conftest import fast_config
from tests.helpers.control_review14e import raw_request


def _request(method: str, path: str, body: bytes) -> bytes:
    return (b"%s %s HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (method.encode(), path.encode(), len(body), body))


def test_an_integer_too_long_to_read_is_a_400_saying_so(daemon):
    d = daemon(fast_config(instances=0))
    digits = b"1" * (sys.get_int_max_str_digits() + 1)
    for method, path, body in [
        ("POST", "/v1/environments/demo/leases", b'{"client_pid": %d, "timeout": %s}' % (os.getpid(), digits)),
        ("PUT", "/v1/environments/other", b'{"width": %s}' % digits),
        ("DELETE", "/v1/leases/" + "0" * 32, b'{"clean": %s}' % digits),
    ]:
        status, _, answer = raw_request(d.socket, _request(method, path, body))
        error = json.loads(answer)["error"]
        assert status == 400 and error["type"] == "RenderdError", (path, status, error)
        assert f"an integer of more than {sys.get_int_max_str_digits()} digits" in error["message"], error
        assert "set_int_max_str_digits" not in error["message"] and "not UTF-8" not in error["message"], error
    # Not UTF-8 is still said so.
    status, _, answer = raw_request(d.socket, _request("PUT", "/v1/environments/other", b'{"width": "\xff"}'))
    assert status == 400 and "not UTF-8 JSON" in json.loads(answer)["error"]["message"]
    assert d.health()["status"] == "ready"
