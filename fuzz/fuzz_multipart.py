"""Coverage-guided fuzzing of POST /train with atheris: the multipart splitter, the frame checks and the
WSGI application around them (run on demand, not in the test suite).

    pip install atheris
    python fuzz/fuzz_multipart.py -atheris_runs=200000            # or -max_total_time=300
    python fuzz/fuzz_multipart.py crash-<hash>                     # replay a finding

The input picks a Content-Type and a body: the raw input, or a valid frame (with the right token, so the
metadata and image checks behind the token check are reached) with input bytes spliced into it or its
metadata part replaced by them. The body is posted through ``renderd.transport.http.make_player_app``
with a hand-built WSGI environ, to a registry whose bridge has an action waiting. Any exception, any 5xx
answer and any answer that is not JSON is a finding.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import time

import atheris

with atheris.instrument_imports():
    from renderd.protocol import encode_action
    from renderd.transport.http import PlayerBridgeRegistry, make_player_app
    from renderd.transport.multipart import MultipartError, split_multipart

TOKEN = "atheris-token"
BOUNDARY = "fuzzBoundary42"
ACTION = encode_action({"action": "Pass", "sequenceId": 1})
CONTENT_TYPES = [
    f"multipart/form-data; boundary={BOUNDARY}",
    "multipart/form-data; boundary=b",
    'multipart/form-data; boundary="quoted boundary"',
]


def _part(name: str, body: bytes) -> bytes:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + body + b"\r\n"


def _frame(metadata: bytes) -> bytes:
    parts = [_part("image", bytes(18)), _part("image_depth", bytes(24)), _part("metadata", metadata),
             _part("token", TOKEN.encode())]
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


VALID_METADATA = json.dumps({"agents": [{"screenWidth": 3, "screenHeight": 2}], "sequenceId": 0}).encode()
VALID = _frame(VALID_METADATA)


def _call(body: bytes, content_type: str) -> tuple[int, dict[str, str], bytes]:
    registry = PlayerBridgeRegistry(max_request_size=1 << 20)
    bridge = registry.register(TOKEN)
    bridge.send(ACTION, time.monotonic() + 5)
    app = make_player_app(registry)
    got: dict = {}

    def start_response(status, headers, exc_info=None):
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": "/train", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "1", "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
    }
    try:
        data = b"".join(app(environ, start_response))
    finally:
        registry.close()
    return got["status"], got["headers"], data


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    choice = fdp.ConsumeIntInRange(0, len(CONTENT_TYPES))
    content_type = CONTENT_TYPES[choice] if choice < len(CONTENT_TYPES) else fdp.ConsumeUnicodeNoSurrogates(80)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:  # the input is the body
        body = fdp.ConsumeBytes(fdp.remaining_bytes())
    elif mode == 1:  # a valid frame with the input spliced in
        at = fdp.ConsumeIntInRange(0, len(VALID))
        cut = fdp.ConsumeIntInRange(0, 16)
        body = VALID[:at] + fdp.ConsumeBytes(fdp.remaining_bytes()) + VALID[at + cut:]
    else:  # a valid frame whose metadata is the input
        body = _frame(fdp.ConsumeBytes(fdp.remaining_bytes()))
    try:  # the splitter alone: only MultipartError
        split_multipart(body, b"fuzzBoundary42")
    except MultipartError:
        pass
    status, headers, answer = _call(body, content_type)
    if status >= 500 or headers.get("Content-Type") != "application/json":
        raise AssertionError(f"POST /train answered {status} {headers}: {answer[:200]!r}")
    json.loads(answer)


if __name__ == "__main__":
    logging.disable(logging.WARNING)  # "refused POST /train ..." for most inputs
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
