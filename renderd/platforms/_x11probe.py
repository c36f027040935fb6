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


#: The first TCP port of X displays (display N listens on 6000 + N).
X_TCP_PORT = 6000


def xlib_name(name: str) -> str:
    """``name`` as python-xlib parses it: libxcb's protocols ``inet`` and ``inet6`` become ``tcp`` and an IPv6
    host loses its brackets (``[::1]:0`` -> ``::1:0``); python-xlib refuses both. Other names are unchanged."""
    protocol, slash, rest = name.rpartition("/") if "/" in name else ("", "", name)
    if protocol in ("inet", "inet6"):
        protocol = "tcp"
    if rest.startswith("["):
        close = rest.find("]")
        if close > 0:
            rest = rest[1:close] + rest[close + 1 :]
    return f"{protocol}{slash}{rest}"


def connect_as_xcb() -> None:
    """Make python-xlib reach a display as libxcb does (and so libX11, Unity's X11 player and every GLX
    client). A local display: on Linux through the abstract socket first, then through the file. python-xlib
    tries the abstract socket only when the file is missing, so a file this process may not open (its mode, a
    security module) failed the probe where the player connects. A display on a host: over TCP to each address
    the host has (IPv6 too; python-xlib tries IPv4 only), with the cookie for an IPv6 peer looked up as libxcb
    does (python-xlib fails on one)."""
    import socket

    import Xlib.error
    import Xlib.support.connect

    linux = sys.platform.startswith("linux")
    file_first = Xlib.support.connect.get_socket
    ipv4_auth = Xlib.support.connect.get_auth

    def get_socket(dname, protocol, host, dno):  # type: ignore[no-untyped-def]
        if linux and protocol in (None, "unix") and host in ("", "unix", None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect("\0" + X11_SOCKET_PATH % dno)
            except OSError:
                sock.close()
            else:
                return sock
        if protocol != "unix" and host and host != "unix":  # (as python-xlib and libxcb decide it is TCP)
            try:
                return socket.create_connection((host, X_TCP_PORT + dno))
            except OSError as exc:
                raise Xlib.error.DisplayConnectionError(dname, str(exc)) from None
        return file_first(dname, protocol, host, dno)

    def get_auth(sock, dname, protocol, host, dno):  # type: ignore[no-untyped-def]
        if sock.family == socket.AF_INET6:
            return ipv6_auth(sock, dno)
        return ipv4_auth(sock, dname, protocol, host, dno)

    Xlib.support.connect.get_socket = get_socket
    Xlib.support.connect.get_auth = get_auth


def ipv6_auth(sock, dno):  # type: ignore[no-untyped-def]
    """The cookie for display ``dno`` reached over IPv6 on ``sock``, as libxcb looks it up: an IPv4-mapped peer
    by its IPv4 address, another by its IPv6 address; for the loopback address, the local cookie if there is
    none for the address. ``(b"", b"")`` when there is none."""
    import socket

    import Xlib.error
    from Xlib import xauth

    packed = socket.inet_pton(socket.AF_INET6, sock.getpeername()[0].split("%")[0])
    if packed[:12] == b"\0" * 10 + b"\xff\xff":
        family, addr = xauth.FamilyInternet, packed[12:]
        loopback = addr[0] == 127
    else:
        family, addr = xauth.FamilyInternetV6, packed
        loopback = packed == b"\0" * 15 + b"\1"
    try:
        authority = xauth.Xauthority()
    except Xlib.error.XauthError:
        return b"", b""
    attempts = [(family, addr)] + ([(xauth.FamilyLocal, socket.gethostname().encode())] if loopback else [])
    for family, addr in attempts:
        try:
            return authority.get_best_auth(family, addr, dno)
        except Xlib.error.XNoAuthError:
            pass
    return b"", b""


def probe_one(name: str) -> dict:
    import Xlib.display
    import Xlib.error

    facts: dict = {"name": name, "ok": False}
    try:
        display = Xlib.display.Display(xlib_name(name))
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
        said = str(exc).replace(f'"{xlib_name(name)}"', f'"{name}"')  # (the name as given, not as translated)
        facts["error"] = f"cannot connect ({said})".replace("\n", " ").strip()
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
