"""X display probe, run as a short-lived child process: ``python -P _x11probe.py NAME...``.

For each display name it connects with python-xlib and prints what it found as one JSON line:
``{"displays": [{"name", "ok", "error", "error_kind", "screen_count", "glx", "vendor", "screens":
[{"width", "height", "depth"}]}]}``. ``error_kind`` says why a display cannot be used: ``name`` (not a
display name), ``connect`` (no server reached), ``refused`` (a server answered the connection setup and
turned it away: authorization, too many clients), ``query`` (a query failed). It decides nothing:
:mod:`renderd.platforms.x11` turns these facts into reasons. Running it in a child means an X server that accepts the connection but never answers cannot
block the caller (the parent applies a deadline), and python-xlib's warnings stay out of the caller. A local
display is reached the way the player's libxcb reaches it (:func:`connect_as_xcb`).
"""

from __future__ import annotations

import importlib.util
import json
import sys


#: A local display's socket: a file, and on Linux also the same name in the abstract socket namespace.
X11_SOCKET_PATH = "/tmp/.X11-unix/X%d"


def setup_answered(family: int, address: object, timeout: float) -> bool:
    """Whether an X server at ``address`` answers a connection setup request (no authorization) within
    ``timeout`` seconds, whatever it answers. False for a server that is stopped or hung: the kernel completes
    the connection from the listen backlog, but no answer comes. True when it answers, and when it cannot be
    told (nothing listens there, or the connection is refused: the server is gone or going, which the
    caller finds out otherwise). Used in the parent too (a managed Xvfb's health, the gl player's server)."""
    import socket
    import struct
    import time

    deadline = time.monotonic() + timeout
    sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        # byte order 'l' (little-endian), protocol 11.0, no authorization name or data
        sock.sendall(struct.pack("<BxHHHHxx", ord("l"), 11, 0, 0, 0))
        remaining = deadline - time.monotonic()
        if remaining <= 0:  # settimeout(0.0) would make the recv non-blocking: EAGAIN, not "no answer"
            return False
        sock.settimeout(remaining)
        sock.recv(1)
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True
    finally:
        sock.close()
    return True


def connect_as_xcb() -> None:
    """Make python-xlib reach a local display as libxcb does (and so libX11, Unity's X11 player and every GLX
    client): on Linux through the abstract socket first, then through the file. python-xlib tries the
    abstract socket only when the file is missing, so a file this process may not open (its mode, a
    security module) failed the probe where the player connects."""
    import socket

    import Xlib.support.connect

    if not sys.platform.startswith("linux"):
        return
    file_first = Xlib.support.connect.get_socket

    def get_socket(dname, protocol, host, dno):  # type: ignore[no-untyped-def]
        if protocol in (None, "unix") and host in ("", "unix", None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect("\0" + X11_SOCKET_PATH % dno)
            except OSError:
                sock.close()
            else:
                return sock
        return file_first(dname, protocol, host, dno)

    Xlib.support.connect.get_socket = get_socket


def probe_one(name: str) -> dict:
    import Xlib.display
    import Xlib.error

    facts: dict = {"name": name, "ok": False}
    try:
        display = Xlib.display.Display(name)
    except Xlib.error.DisplayNameError as exc:
        facts["error"] = f"not a valid X display name ({exc})"
        facts["error_kind"] = "name"
        return facts
    except Xlib.error.DisplayConnectionError as exc:
        if isinstance(exc.msg, bytes):  # the server's own answer to the connection setup: it runs, and refused
            said = exc.msg.decode("utf-8", "replace").strip() or "no reason given"
            facts["error"] = f"the X server refused the connection ({said})".replace("\n", " ")
            facts["error_kind"] = "refused"
            return facts
        facts["error"] = f"cannot connect ({exc})".replace("\n", " ").strip()
        facts["error_kind"] = "connect"
        return facts
    except (ConnectionError, OSError) as exc:
        facts["error"] = f"cannot connect ({exc})".replace("\n", " ").strip()
        facts["error_kind"] = "connect"
        return facts
    except Exception as exc:  # python-xlib raises assorted errors on odd servers
        facts["error"] = f"cannot connect ({type(exc).__name__}: {exc})"
        facts["error_kind"] = "connect"
        return facts
    try:
        count = display.screen_count()
        facts["screen_count"] = count
        facts["glx"] = "GLX" in display.list_extensions()
        facts["vendor"] = display.display.info.vendor
        facts["screens"] = [
            {
                "width": display.screen(i).width_in_pixels,
                "height": display.screen(i).height_in_pixels,
                "depth": display.screen(i).root_depth,
            }
            for i in range(count)
        ]
        facts["ok"] = True
    except Exception as exc:
        facts["error"] = f"the X server did not answer a query ({type(exc).__name__}: {exc})"
        facts["error_kind"] = "query"
    finally:
        try:
            display.close()
        except Exception:
            pass
    return facts


def main(argv: list[str]) -> int:
    if importlib.util.find_spec("Xlib") is None:
        sys.stdout.write("RENDERD-X11-PROBE " + json.dumps({"error": "python-xlib is not installed"}) + "\n")
        return 0
    connect_as_xcb()
    displays = [probe_one(name) for name in argv]
    sys.stdout.write("RENDERD-X11-PROBE " + json.dumps({"displays": displays}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
