"""``renderd-player`` / ``python -m renderd.player``: the reference player's command line.

It reads what an AI2-THOR Unity build reads (the ``AI2THOR_*`` environment variables and Unity's
single-dash flags) plus a few double-dash flags of its own; ``renderd-player --help`` lists them all,
and docs/player.md describes the program. Exit codes: 0 normal end (client closed the pipe, SIGTERM),
1 pipe I/O error (or ``--help``'s text could not be written), 2 bad command line or environment, 3 unhandled
error (traceback in the log), 4 malformed message from the client; a fault hook exits with the code or
signal it was asked for.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import unicodedata
from typing import IO, NoReturn, Sequence

from renderd.player import signals


EXIT_OK = 0
#: Standard output cannot be written (``--help`` into a full disk or a closed pipe).
EXIT_OUTPUT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL_ERROR = 3
#: Seconds to sleep at most in --start-delay.
MAX_START_DELAY = 3600.0
#: Most --metadata-objects: about 15 MB of metadata, within the 16 MiB the player's answer-size budget keeps
#: for metadata (Player.limit_answer_size). Many more would be built for minutes, or until memory runs out,
#: before the pipes are opened, only to make answers a client refuses.
MAX_METADATA_OBJECTS = 16384

ENV_SERVER_TYPE = "AI2THOR_SERVER_TYPE"
ENV_SERVER_PIPE = "AI2THOR_FIFO_SERVER_PIPE_PATH"
ENV_CLIENT_PIPE = "AI2THOR_FIFO_CLIENT_PIPE_PATH"
ENV_HOST = "AI2THOR_HOST"
ENV_PORT = "AI2THOR_PORT"
ENV_TOKEN = "AI2THOR_CLIENT_TOKEN"
ENV_SCREENSHOT = "AI2THOR_SERVER_SIDE_SCREENSHOT"
ENV_PLATFORM = "RENDERD_PLATFORM"
ENV_FAULT_AT_START = "RENDERD_PLAYER_FAULT_AT_START"
ENV_LOG_LEVEL = "RENDERD_PLAYER_LOG_LEVEL"

KNOWN_PLATFORMS = ("CloudRendering", "Linux64", "OSXIntel64", "headless")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s renderd-player[%(process)d] %(name)s: %(message)s"
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"

logger = logging.getLogger("renderd.player")

_EPILOG = f"""\
environment (read as an AI2-THOR build reads them):
  {ENV_SERVER_TYPE}            FIFO (default) or WSGI (HTTP, via renderd.player.http_link)
  {ENV_SERVER_PIPE}  path of server.pipe (player -> client), FIFO
  {ENV_CLIENT_PIPE}  path of client.pipe (client -> player), FIFO
  {ENV_HOST}, {ENV_PORT}      address of the HTTP endpoint, WSGI
  {ENV_TOKEN}           token for the HTTP endpoint, WSGI
  {ENV_SCREENSHOT} True: answers carry images; False or unset: metadata only (as a
                                 build's bool.Parse reads it: either case, spaces around; another value
                                 is a bad environment, exit 2)
  {ENV_PLATFORM}               set by renderd: CloudRendering => RGB is RGBA (4 bytes/pixel);
                                 Linux64, headless or unset => 3 bytes/pixel
  {ENV_FAULT_AT_START}  same as --fault-at-start
  {ENV_LOG_LEVEL}       same as --log-level
  RENDERD_PLAYER_PING_TIMEOUT    seconds the first GET /ping waits for its answer, WSGI
                                 (default 5; more than 0, at most 30)

fault hooks (action {{"action": "RenderdFault", "fault": KIND, ...}}): abort, segfault,
  exit (code), hang, sleep (seconds), garbage, oversize, truncate (code), close; "when": "after"
  answers first. Unknown arguments (Unity's single-dash ones, and any other) are ignored and logged.

exit codes: 0 done (client closed the pipe, SIGTERM), 1 pipe I/O error (or --help's text could not be
  written), 2 bad command line or environment, 3 unhandled error (traceback in the log), 4 malformed
  message from the client.
"""


class _ExactParser(argparse.ArgumentParser):
    """Flags are recognised only when written in full (or as ``-flag=value``), as Unity recognises them.

    ``allow_abbrev=False`` stops abbreviations of double-dash flags only: argparse still reads an unknown
    single-dash argument that begins with ``-h`` as ``-h`` with a value (``-headless``: an error, exit 2),
    and one that begins one of the player's single-dash flags as that flag (``-n`` as ``-nographics``,
    ``-log`` as ``-logFile`` taking the next argument). Unity ignores all of them; so does the player.
    """

    def _get_option_tuples(self, option_string: str) -> list:
        return []

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        """argparse's, without its silence when the text cannot be written: ``--help > /dev/full`` exited 0
        with nothing written. Now the help, or a usage error's message, is flushed at once; when standard
        output cannot take it the player says so on standard error (nothing more for a closed pipe, as
        ``renderd`` does) and exits 1."""
        if not message:
            return
        file = file or sys.stdout
        try:
            file.write(message)
            file.flush()
        except OSError as exc:
            if file is not sys.stdout:  # (stderr, where a usage error is written: nowhere left to say it)
                return
            _output_failed(exc)
        except (AttributeError, ValueError):  # no stream at all (pythonw), or a closed one
            pass


def _output_failed(exc: OSError) -> NoReturn:
    """Standard output cannot be written: one line on standard error (none for a closed pipe), exit 1."""
    from renderd.errors import os_error_message

    try:  # the unwritten rest goes nowhere, not into a second failure as Python flushes it at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    if exc.errno != errno.EPIPE:
        try:
            print(f"renderd-player: error: {os_error_message(exc, 'cannot write to standard output')}",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError, AttributeError):
            pass
    sys.exit(EXIT_OUTPUT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    from renderd.player.faults import START_FAULTS
    from renderd.player.renderer import RENDERERS

    p = _ExactParser(
        prog="renderd-player",
        description="renderd's reference player: speaks the player side of the AI2-THOR wire protocol and "
        "renders a small deterministic 3-D room with numpy.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    unity = p.add_argument_group("Unity player flags (as AI2-THOR passes them)")
    unity.add_argument("-screen-width", dest="screen_width", type=int, default=300, metavar="W",
                       help="frame width in pixels (default 300)")
    unity.add_argument("-screen-height", dest="screen_height", type=int, default=300, metavar="H",
                       help="frame height in pixels (default 300)")
    unity.add_argument("-screen-quality", dest="screen_quality", default=None, metavar="Q",
                       help="quality level (logged; the numpy renderer has one quality)")
    unity.add_argument("-screen-fullscreen", dest="screen_fullscreen", default=None, metavar="0|1",
                       help="fullscreen flag (logged, ignored: there is no window)")
    unity.add_argument("-batchmode", dest="batchmode", action="store_true",
                       help="run without user interaction (always the case; logged)")
    unity.add_argument("-nographics", dest="nographics", action="store_true",
                       help="no rendering: messages carry metadata only, no image fields; no graphics device "
                       "is used, whatever --renderer says")
    unity.add_argument("-force-device-index", dest="device_index", type=int, default=None, metavar="N",
                       help="GPU (Vulkan device) index to render on; passed to the renderer")
    unity.add_argument("-logFile", dest="log_file", default=None, metavar="PATH",
                       help="append the player's log to PATH ('-' means stdout; default stderr)")
    own = p.add_argument_group("renderd-player flags")
    own.add_argument("--renderer", choices=RENDERERS, default="numpy",
                     help="numpy (CPU ray casting, default) or gl (renderd.player.gl)")
    own.add_argument("--static-frame", action="store_true",
                     help="skip rendering: send one precomputed frame every step (transport benchmarks)")
    own.add_argument("--metadata-objects", type=int, default=0, metavar="N",
                     help=f"add N synthetic objects (~0.9 KB of metadata each) to every message "
                     f"(0..{MAX_METADATA_OBJECTS})")
    own.add_argument("--fault-at-start", choices=START_FAULTS, default=os.environ.get(ENV_FAULT_AT_START) or None,
                     metavar="KIND",
                     help="misbehave at startup: " + ", ".join(START_FAULTS)
                     + " (no-open: exit 1 before opening server.pipe; hang: hang before opening it; "
                     "hang-open: open it, then hang; exit/abort/segfault: open it, then die before the "
                     "first message; garbage: send a malformed first message)")
    own.add_argument("--start-delay", type=float, default=0.0, metavar="SECONDS",
                     help="sleep this long before opening server.pipe (a slow boot)")
    own.add_argument("--log-level", choices=LOG_LEVELS, default=(os.environ.get(ENV_LOG_LEVEL) or "info").lower(),
                     help="log level; debug logs every action (default info)")
    return p


def _setup_logging(log_file: str | None, level: str) -> None:
    if log_file is None:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
    elif log_file == "-":
        handler = logging.StreamHandler(sys.stdout)
    else:
        handler = logging.FileHandler(log_file, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))


def _is_dotnet_space(char: str) -> bool:
    """Whether .NET's ``bool.Parse`` trims ``char`` from the ends of its argument (``Char.IsWhiteSpace``, or NUL)."""
    return char in "\t\n\v\f\r\x85\x00" or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def parse_dotnet_bool(value: str) -> bool | None:
    """``value`` read as a build's C# ``bool.Parse`` reads it: ``True`` or ``False`` in any case, with white space
    around it; None for any other value (``""``, ``yes``, ``1``, ...), which ``bool.Parse`` rejects."""
    start, end = 0, len(value)
    while start < end and _is_dotnet_space(value[start]):
        start += 1
    while end > start and _is_dotnet_space(value[end - 1]):
        end -= 1
    word = value[start:end]
    if not word.isascii():
        return None
    return {"true": True, "false": False}.get(word.lower())


def _usage_error(message: str) -> int:
    signals.exiting()  # exit 2 is decided: a signal while it is reported must not make it 0
    logger.error("%s", message)
    print(f"renderd-player: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _start_fault(kind: str | None, when: str) -> None:
    """Carry out --fault-at-start ``kind`` if it belongs at ``when`` ("before-open" or "after-open")."""
    from renderd.player import faults

    if kind is None:
        return
    if when == "before-open":
        if kind == "no-open":
            faults.crash("exit", faults.DEFAULT_FAULT_EXIT_CODE)
        if kind == "hang":
            faults.hang()
    elif when == "after-open":
        if kind == "hang-open":
            faults.hang()
        if kind in ("exit", "abort", "segfault"):
            faults.crash(kind, faults.DEFAULT_FAULT_EXIT_CODE)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the player; returns the process exit code.

    Once the code is decided SIGTERM and SIGINT are ignored (:func:`renderd.player.signals.exiting`), so one
    that arrives while the process exits does not change its status: the caller is to exit with it.
    """
    signals.install()
    code: int | None = None
    try:
        code = _run(argv)
        signals.exiting()
    except signals.Terminated as exc:  # the first signal, arriving just as _run returned (or while it logged)
        signals.exiting()
        if code is None:
            code = EXIT_OK
            logger.info("received %s; exiting", exc.name)
    except SystemExit:  # argparse: --help, or a bad command line (exit 2)
        signals.exiting()
        logging.shutdown()
        raise
    logging.shutdown()
    return code


def _run(argv: Sequence[str] | None) -> int:
    try:
        return _main(argv)
    except signals.Terminated as exc:
        logger.info("received %s; exiting", exc.name)
        return EXIT_OK
    except Exception:  # a bug or a renderer failure: into the log, where renderd quotes it from
        signals.exiting()  # exit 3 is decided: a signal while the traceback is written must not make it 0
        logger.critical("player crashed with an unhandled error; exiting with code %d", EXIT_INTERNAL_ERROR,
                        exc_info=True)
        return EXIT_INTERNAL_ERROR


def _main(argv: Sequence[str] | None) -> int:
    from renderd.player.faults import START_FAULTS

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.fault_at_start is not None and args.fault_at_start not in START_FAULTS:
        parser.error(f"{ENV_FAULT_AT_START}={args.fault_at_start!r}: expected one of {', '.join(START_FAULTS)}")
    if args.log_level not in LOG_LEVELS:
        parser.error(f"{ENV_LOG_LEVEL}={args.log_level!r}: expected one of {', '.join(LOG_LEVELS)}")
    try:
        _setup_logging(args.log_file, args.log_level)
    except OSError as exc:
        print(f"renderd-player: error: cannot open -logFile {args.log_file}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE

    env = os.environ
    server_type = (env.get(ENV_SERVER_TYPE) or "FIFO").upper()
    platform = env.get(ENV_PLATFORM) or None
    shown = list(argv) if argv is not None else sys.argv[1:]
    logger.info("starting: pid %d, argv %s", os.getpid(), " ".join([sys.argv[0], *shown]))
    if unknown:
        logger.warning("ignoring unknown arguments (as Unity does): %s", " ".join(unknown))
    logger.info(
        "server type %s, platform %s, %d x %d, quality %s, fullscreen %s, batchmode %s, nographics %s, "
        "device index %s, renderer %s%s, server-side screenshot %s, client token %s",
        server_type, platform or "(unset)", args.screen_width, args.screen_height, args.screen_quality,
        args.screen_fullscreen, args.batchmode, args.nographics, args.device_index, args.renderer,
        " (static frame)" if args.static_frame else "", env.get(ENV_SCREENSHOT, "(unset)"),
        "set" if env.get(ENV_TOKEN) else "unset",
    )
    if platform is not None and platform not in KNOWN_PLATFORMS:
        logger.warning("unknown %s=%r (expected one of %s); using 3-byte RGB", ENV_PLATFORM, platform,
                       ", ".join(KNOWN_PLATFORMS))
    from renderd.player.core import MAX_RESOLUTION, Player
    from renderd.player.renderer import make_renderer

    if not (0 < args.screen_width <= MAX_RESOLUTION and 0 < args.screen_height <= MAX_RESOLUTION):
        return _usage_error(f"-screen-width/-screen-height must be 1..{MAX_RESOLUTION}, "
                            f"got {args.screen_width} x {args.screen_height}")
    if not 0 <= args.metadata_objects <= MAX_METADATA_OBJECTS:
        return _usage_error(f"--metadata-objects must be 0..{MAX_METADATA_OBJECTS}, got {args.metadata_objects}")
    if not 0 <= args.start_delay <= MAX_START_DELAY:
        return _usage_error(f"--start-delay must be 0..{MAX_START_DELAY:g} seconds")
    # As a build's AgentManager (LoadBoolVariable): unset is false, and a value bool.Parse rejects stops it at start.
    screenshot_value = env.get(ENV_SCREENSHOT)
    screenshot = False if screenshot_value is None else parse_dotnet_bool(screenshot_value)
    if screenshot is None:
        return _usage_error(f"{ENV_SCREENSHOT}={screenshot_value!r}: expected True or False (either case; unset "
                            "means False), as an AI2-THOR build parses it with bool.Parse")
    if server_type not in ("FIFO", "WSGI"):
        return _usage_error(f"{ENV_SERVER_TYPE}={server_type!r}: expected FIFO or WSGI")

    if server_type == "FIFO":
        server_path, client_path = env.get(ENV_SERVER_PIPE), env.get(ENV_CLIENT_PIPE)
        if not server_path or not client_path:
            missing = [n for n in (ENV_SERVER_PIPE, ENV_CLIENT_PIPE) if not env.get(n)]
            unset = "neither is set" if len(missing) == 2 else f"{missing[0]} is not set"
            which = (f"{ENV_SERVER_TYPE}=FIFO" if env.get(ENV_SERVER_TYPE)
                     else f"{ENV_SERVER_TYPE} is unset, so FIFO (the default), which")
            return _usage_error(
                f"{which} needs {ENV_SERVER_PIPE} and {ENV_CLIENT_PIPE}, the named pipes to its client ({unset}). "
                "renderd-player is normally started by renderd, which sets them: renderd.launch(...) in Python, "
                "or `renderd start` (the daemon) and renderd.connect(...)"
            )
        link_args = (server_path, client_path)
    else:
        try:
            from renderd.player.http_link import run_http
        except ImportError as exc:
            return _usage_error(f"{ENV_SERVER_TYPE}=WSGI needs renderd.player.http_link, which cannot be "
                                f"imported ({exc}); use FIFO")
        host, port = env.get(ENV_HOST) or "127.0.0.1", env.get(ENV_PORT)
        try:
            port_number = int(port or "")
        except ValueError:
            port_number = 0
        if not 0 < port_number < 65536:
            got = "which is not set" if port is None else f"got {port!r}"
            return _usage_error(f"{ENV_SERVER_TYPE}=WSGI needs {ENV_PORT} (a port number, 1-65535), {got}")
        link_args = (host, port_number, env.get(ENV_TOKEN))

    renderer_name = args.renderer
    if args.nographics and renderer_name != "numpy":
        # As Unity's -nographics initialises no graphics device: no frame is rendered, so no GPU or display
        # is needed (the visibility of objects is worked out on the CPU whatever the renderer).
        logger.info("-nographics: nothing is rendered, so the %s renderer is not started", renderer_name)
        renderer_name = "numpy"
    try:
        renderer = make_renderer(renderer_name, device_index=args.device_index)
    except (ImportError, ValueError, RuntimeError) as exc:
        return _usage_error(f"cannot start the {renderer_name} renderer: {exc}")
    if not screenshot and not args.nographics:
        logger.info("%s is not True: answers carry metadata only, no images, as a build's", ENV_SCREENSHOT)
    player = Player(
        width=args.screen_width,
        height=args.screen_height,
        platform=platform,
        headless=args.nographics or not screenshot,
        renderer=renderer,
        static_frame=args.static_frame,
        metadata_objects=args.metadata_objects,
        logger=logging.getLogger("renderd.player.core"),
    )
    if args.start_delay:
        logger.info("start delay: sleeping %.3f s", args.start_delay)
        signals.sleep(args.start_delay)
    fault = args.fault_at_start
    if fault:
        logger.warning("fault at start: %s", fault)
    _start_fault(fault, "before-open")

    try:
        if server_type == "FIFO":
            from renderd.player.fifo_link import FifoLink

            link = FifoLink(player, *link_args)
            code = link.serve(garbage_first=fault == "garbage", after_open=lambda: _start_fault(fault, "after-open"))
        else:
            _start_fault(fault, "after-open")  # exit/abort/segfault/hang-open before serving
            result = run_http(player, *link_args, garbage_first=fault == "garbage")
            code = EXIT_OK if result is None else int(result)
    finally:
        close = getattr(renderer, "close", None)
        if close is not None:
            close()
    logger.info("exiting with code %d", code)
    return code


if __name__ == "__main__":
    sys.exit(main())
