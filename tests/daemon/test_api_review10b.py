"""docs/api.md against the code and a running daemon: routes, limits, timeouts, answers' fields."""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket

import waitress.adjustments

from renderd.daemon import api, client, leases, metrics, service, supervisor
from renderd.errors import ERROR_TYPES, LeaseBusyError, LeaseError

from tests.daemon.conftest import fast_config

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _doc() -> str:
    return " ".join(DOC.read_text().split())  # (sentences are wrapped anywhere)


def _exchange(path: str, data: bytes, timeout: float = 10.0) -> bytes:
    """``data`` sent on the control socket at ``path`` as it is; the whole answer, until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_request_head_over_the_limit_is_answered_431_as_docs_api_md_says(daemon):
    # docs/api.md said a request head is at most 64 KiB and that "a larger Content-Length is answered 413",
    # which left a reader to take 413 for a head over the limit as well: the server answers 431.
    limit = service.API_MAX_HEADER_SIZE
    doc = _doc()
    assert f"a request head at most {limit >> 10} KiB" in doc
    assert f"a larger head 431 (Request Header Fields Too Large)" in doc, "docs/api.md: what a head over the limit gets"
    d = daemon(fast_config(instances=0))
    head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * limit + b"\r\n\r\n"
    answer = _exchange(d.socket, head)
    status, _, rest = answer.partition(b"\r\n")
    assert status.split()[1] == b"431", answer[:300]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body["error"]["type"] == "RenderdError", body
    # Just under the limit, the request is served.
    small = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (limit - 1024) + b"\r\n\r\n"
    assert _exchange(d.socket, small).split()[1] == b"200"
