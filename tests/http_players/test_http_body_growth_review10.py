"""A request body's buffer grows even while something else still holds a view of it."""

from __future__ import annotations

from renderd.transport import http as http_transport

from tests.helpers.http_util import connect, frame_body, request_bytes


def test_a_body_grows_while_a_view_of_it_is_held_elsewhere(served, monkeypatch):
    # The body's buffer is a bytearray that grows as bytes arrive; growing it in place fails (BufferError)
    # while any view of it exists. One can outlive the read that made it: another thread that inspects
    # this one's frames (Session.close looks for a step in progress that way) keeps their locals alive.
    # The connection then failed with "HTTP connection ... failed" and no answer.
    monkeypatch.setattr(http_transport, "BODY_START_SIZE", 1024)
    held = []
    recv_into = http_transport._Connection._recv_into

    def holding(self, view, *args, **kwargs):
        held.append(view)  # as a frame's locals snapshot would
        return recv_into(self, view, *args, **kwargs)

    monkeypatch.setattr(http_transport._Connection, "_recv_into", holding)
    client = connect(served)
    body = frame_body("no-such-token", width=128, height=128)
    data = request_bytes(body)
    assert len(body) > 16 * 1024 > http_transport.HEAD_READ_SIZE // 2
    head_end = data.index(b"\r\n\r\n") + 4
    client.send(data[:head_end])  # the head alone, then the body: its buffer must grow as it arrives
    client.send(data[head_end:])
    response = client.response()
    assert response.status == 403, response  # the body was read whole; only then is the token refused
    held.clear()
