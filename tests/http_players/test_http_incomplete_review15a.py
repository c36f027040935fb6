"""A request that never arrives whole gets an answer saying so, with how much of it came.

A client whose Content-Length promises more than it sends (or that stalls, or that shuts its sending side
half-way) waits for an answer: it must get one naming what was incomplete and how many bytes arrived,
with the right status (408 for a stall, 400 for a body ended early),
and a served player's client must be told why its player's connection ended.
"""

from __future__ import annotations

import socket
import time

import pytest

import renderd.transport.http as http_transport
from renderd.errors import PlayerCrashed
from renderd.protocol import encode_action
from tests.helpers.http_util import DEADLINE, connect, frame_body, request_bytes


def _deadline() -> float:
    return time.monotonic() + DEADLINE


def _message(response) -> str:
    return response.json()["error"]["message"]


def test_a_body_that_stops_short_of_its_content_length_is_answered_408(served, monkeypatch):
    # The body stalls (its Content-Length lies, or the sender stopped): after REQUEST_TIMEOUT without a byte
    # the server answers 408 with how much of the body came, instead of dropping the connection unanswered.
    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.3)
    monkeypatch.setattr(http_transport, "MIN_BODY_RATE", 1.0)  # the whole-body deadline is far: the stall ends it
    client = connect(served)
    body = b"x" * 100
    client.send(b"POST /train HTTP/1.1\r\nContent-Length: 1000\r\nContent-Type: multipart/form-data; boundary=b\r\n\r\n"
                + body)
    response = client.response()
    assert response.status == 408, response
    message = _message(response)
    assert "100 of its 1000 bytes" in message and "REQUEST_TIMEOUT" in message, message
    assert client.closed_by_server()


def test_a_players_stalled_frame_tells_its_client_why_renderd_closed_the_connection(served, monkeypatch):
    registry, _, _ = served
    bridge = registry.register(name="stalled player")
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token, seq=0)))
    bridge.recv(_deadline())
    bridge.send(encode_action({"action": "Pass"}), _deadline())
    assert client.response().status == 200
    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.3)
    monkeypatch.setattr(http_transport, "MIN_BODY_RATE", 1.0)
    data = request_bytes(frame_body(bridge.token, seq=1))
    head_end = data.index(b"\r\n\r\n") + 4
    client.send(data[: head_end + 50])
    response = client.response()
    assert response.status == 408, response
    length = len(data) - head_end
    assert f"50 of its {length} bytes" in _message(response), response
    with pytest.raises(PlayerCrashed, match="408") as caught:
        bridge.recv(_deadline())
    assert "renderd closed the HTTP connection of stalled player" in str(caught.value)


def test_a_body_ended_by_a_half_close_is_answered_400_and_counts_as_a_hang_up(served):
    # The client shuts its sending side before Content-Length bytes: it can still read, and is told the body
    # ended early and where. The player hung up (its client is told so), renderd refused nothing.
    registry, _, _ = served
    bridge = registry.register(name="halfway player")
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token, seq=0)))
    bridge.recv(_deadline())
    bridge.send(encode_action({"action": "Pass"}), _deadline())
    assert client.response().status == 200
    data = request_bytes(frame_body(bridge.token, seq=1))
    head_end = data.index(b"\r\n\r\n") + 4
    client.send(data[: head_end + 70])
    client.sock.shutdown(socket.SHUT_WR)
    response = client.response()
    assert response.status == 400, response
    length = len(data) - head_end
    message = _message(response)
    assert f"after 70 of its {length} bytes" in message and "Content-Length" in message, message
    assert client.closed_by_server()
    with pytest.raises(PlayerCrashed, match="halfway player closed its HTTP connection"):
        bridge.recv(_deadline())
