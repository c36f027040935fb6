"""A tiny scripted FIFO player for transport tests: starts in milliseconds and misbehaves on request.

Run as ``python tests/transport/peer.py MODE [ARG]`` with the ``AI2THOR_FIFO_*`` variables set. It opens
``server.pipe``, sends a first message (sequenceId 0), opens ``client.pipe`` and answers each action with
a ``W`` x ``H`` RGB frame whose bytes are ``sequenceId % 251`` (so a test can check every frame). Modes:

=============  =========================================================================================
serve          answer every action (size from ``PEER_WIDTH``/``PEER_HEIGHT``, default 32 x 24)
wrong-seq      answer every action with sequenceId + 1000
no-client      send the first message, then never open client.pipe (sleep until killed)
slow-reader    open client.pipe but read nothing for ARG seconds, then serve
exit-first     exit with code ARG right after the first message, before opening client.pipe
close-client   open client.pipe, close it at once, then sleep until killed
read-close     read one action, then close client.pipe without answering and sleep until killed
bad-failure    answer every action as failed (``lastActionSuccess`` false, ``errorMessage`` "failed on
               purpose") with a ``sceneName`` that is not valid UTF-8 (only a full decode notices)
=============  =========================================================================================

In every mode that answers, the action ``HalfThenHang`` (or the one named by ``PEER_HALF_ACTION``) is
answered with the first half of its message only; the peer then sleeps until killed (a player stuck in
the middle of a message).

Only the standard library and msgpack are imported so that start-up stays fast.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time

import msgpack

HEADER = struct.Struct("!BI")
EOM = HEADER.pack(255, 0)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def message(seq: int, width: int, height: int, *, bad_failure: bool = False) -> bytes:
    agent = {
        "screenWidth": width,
        "screenHeight": height,
        "lastAction": "",
        "lastActionSuccess": True,
        "errorMessage": "",
    }
    if bad_failure:
        agent.update(lastActionSuccess=False, errorMessage="failed on purpose", sceneName="ZZZZ")
    metadata = msgpack.packb({"agents": [agent], "sequenceId": seq, "activeAgentId": 0})
    if bad_failure:  # the same 4-byte str, its bytes no longer UTF-8
        metadata = metadata.replace(b"\xa4ZZZZ", b"\xa4\xff\xfe\xfd\xfc")
    frame = bytes([seq % 251]) * (width * height * 3)
    return b"".join([HEADER.pack(1, len(metadata)), metadata, HEADER.pack(4, len(frame)), frame, EOM])


def read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        data = os.read(fd, n)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def read_action(fd: int) -> dict | None:
    action = None
    while True:
        header = read_exact(fd, HEADER.size)
        if header is None:
            return None
        ftype, length = HEADER.unpack(header)
        if ftype == 255:
            return action
        body = read_exact(fd, length)
        if body is None:
            return None
        action = json.loads(body)


def main() -> int:
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    width = int(os.environ.get("PEER_WIDTH", "32"))
    height = int(os.environ.get("PEER_HEIGHT", "24"))
    out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
    write_all(out, message(0, width, height))
    print("peer: first message sent", flush=True)
    if mode == "exit-first":
        return int(arg or 1)
    if mode == "no-client":
        time.sleep(3600)
        return 0
    inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
    if mode == "close-client":
        os.close(inp)
        time.sleep(3600)
        return 0
    if mode == "read-close":
        read_action(inp)
        os.close(inp)
        time.sleep(3600)
        return 0
    if mode == "slow-reader":
        time.sleep(float(arg or 1))
    offset = 1000 if mode == "wrong-seq" else 0
    while True:
        action = read_action(inp)
        if action is None:
            return 0
        answer = message(int(action["sequenceId"]) + offset, width, height, bad_failure=mode == "bad-failure")
        if action.get("action") == os.environ.get("PEER_HALF_ACTION", "HalfThenHang"):
            write_all(out, answer[: len(answer) // 2])
            time.sleep(3600)
            return 0
        write_all(out, answer)


if __name__ == "__main__":
    sys.exit(main())
