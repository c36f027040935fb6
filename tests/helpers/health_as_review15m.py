"""``ControlClient().health()`` asked as another user, for the tests of the default socket's directory."""

from __future__ import annotations

import os

from renderd.daemon.client import ControlClient
from renderd.errors import RenderdError


def health_as(uid: int) -> str:
    """``ControlClient().health()`` in a forked child running as ``uid`` (its group too, no supplementary ones)
    without ``XDG_RUNTIME_DIR`` or ``RENDERD_SOCKET`` (so with the default socket
    ``/tmp/renderd-UID/renderd.sock``): "answered: ..." or "refused: ..."."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.environ.pop("XDG_RUNTIME_DIR", None)
            os.environ.pop("RENDERD_SOCKET", None)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                answer = f"answered: {ControlClient(timeout=5).health()}"
            except RenderdError as exc:
                answer = f"refused: {exc}"
            os.write(w, answer.encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()
