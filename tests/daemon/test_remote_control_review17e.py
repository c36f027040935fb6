"""The control API on the daemon's HTTP listener as docs/http.md describes it: no lease granted there, but a lease's
state and end by its id served as on the control socket; and request bodies that are not a JSON object named in
JSON's words."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from renderd.daemon import api, service
from renderd.transport import http
from tests.daemon.conftest import fast_config
from tests.helpers.http_control_review14e import call, control_token

HTTP_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "http.md"


def _doc() -> str:
    return " ".join(HTTP_MD.read_text().split())  # (sentences are wrapped anywhere)


def test_a_lease_is_looked_up_and_ended_over_the_http_listener_but_never_granted_there(daemon):
    d = daemon(fast_config(daemon='http = "127.0.0.1:0"'))
    token = control_token(d)
    (first,) = d.players()
    lease = d.client.lease("demo", timeout=20)
    path = f"/v1/leases/{lease['lease']}"

    # Without the control token: 401, and the lease is untouched.
    status, headers, body = call(d, "DELETE", path, body={"clean": True})
    assert status == 401 and headers["www-authenticate"].startswith("Bearer"), body
    assert d.client.lease_status(lease["lease"])["ended"] is None

    # A lease request there is refused whatever else it holds (an unknown environment included).
    for environment in ("demo", "nothing-of-that-name"):
        status, _, body = call(d, "POST", f"/v1/environments/{environment}/leases", token=token,
                               body={"client_pid": os.getpid()})
        assert status == 403 and json.loads(body)["error"]["type"] == "LeaseError", body

    # With it: the lease's state, then its end, as on the control socket.
    status, _, body = call(d, "GET", path, token=token)
    assert status == 200, body
    assert json.loads(body) == d.client.lease_status(lease["lease"])
    assert json.loads(body)["ended"] is None
    status, _, body = call(d, "DELETE", path, token=token, body={"clean": True})
    assert (status, json.loads(body)) == (200, {"released": True, "recycled": False}), body
    status, _, body = call(d, "GET", path, token=token)
    assert status == 200 and json.loads(body)["ended"] == "released", body
    status, _, body = call(d, "DELETE", path, token=token, body={"clean": True})
    assert status == 404 and json.loads(body)["error"]["type"] == "LeaseError", body
    (player,) = d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["lease"] is None)
    assert player["pid"] == first["pid"]  # handed on, not recycled

    # An unclean end over the listener has the player recycled: its client can reach no next holder.
    lease = d.client.lease("demo", timeout=20)
    status, _, body = call(d, "DELETE", f"/v1/leases/{lease['lease']}", token=token, body={"clean": False})
    assert status == 200 and json.loads(body)["recycled"] is True, body
    d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] not in (None, first["pid"]),
                   what="a new player after the unclean end")
    assert d.client.lease_status(lease["lease"])["ended"] == "unclean"


def test_http_md_says_what_the_listener_serves_and_where_it_goes():
    doc = _doc()
    # The players' routes, which the listener keeps from the control API, are those http.md names.
    assert service.PLAYER_PATHS == {http.PING_PATH, http.FRAME_ROUTE[1]}
    assert f"`GET {http.PING_PATH}` answers `200 pong`" in doc
    assert f"`{http.FRAME_ROUTE[0]} {http.FRAME_ROUTE[1]}` takes one frame" in doc
    # What a remote client does there: everything but leasing (tested above).
    assert "the listener grants no lease: a lease request there is answered 403 `LeaseError`" in doc
    assert "a lease's state and end by its id (`GET` and `DELETE /v1/leases/{id}`" in doc
    assert "ending leases." not in doc  # (what it said, without saying how or with what)


@pytest.mark.parametrize("raw, kind", [
    (b"null", "null"), (b"[]", "an array"), (b'"demo"', "a string"), (b"3", "a number"), (b"1.5", "a number"),
    (b"true", "true"), (b"false", "false"),
])
@pytest.mark.parametrize("method, path", [
    ("PUT", "/v1/environments/demo"), ("POST", "/v1/environments/demo/leases"), ("DELETE", "/v1/leases/x"),
])
def test_a_body_that_is_no_json_object_is_named_in_json_words(raw, kind, method, path):
    # The answer said "got NoneType", "got list", "got str": Python's names for what the client wrote as JSON.
    import io

    app = api.make_app(None)  # (the body is refused before the supervisor is asked anything)
    got: dict = {}
    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "CONTENT_LENGTH": str(len(raw)),
                         "wsgi.input": io.BytesIO(raw)},
                        lambda status, headers, exc_info=None: got.update(status=status)))
    error = json.loads(body)["error"]
    assert got["status"].startswith("400"), (got, error)
    assert error == {"type": "RenderdError", "message": f"request body must be a JSON object ({{...}}), got {kind}"}


def test_reliability_md_quotes_the_lease_requests_the_control_socket_holds_as_the_code_counts_them():
    # It said "beyond the control socket's connections less 8": waitress keeps 2 of them for itself as well.
    import waitress.adjustments

    connections = waitress.adjustments.Adjustments().connection_limit  # (the control socket leaves it as it is)
    waiting = connections - 2 - service.API_CONNECTION_HEADROOM
    doc = " ".join((HTTP_MD.parent / "reliability.md").read_text().split())
    assert (f"requests that would wait beyond {waiting} (the control socket's {connections} connections, less the 2 "
            f"waitress keeps for itself and the {service.API_CONNECTION_HEADROOM} of `API_CONNECTION_HEADROOM`) are "
            "refused at once (503 `LeaseBusyError`)") in doc
    assert "a lease request there is 403 `LeaseError`" in doc
