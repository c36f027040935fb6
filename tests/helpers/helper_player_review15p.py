"""The reference player with a daemonised helper, run as a launched player's executable:

    [sys.executable, helper_player_review15p.py, PIDFILE, TRIGGER, <the player's own arguments>...]

As it starts it double-forks a helper in a session of its own (``setsid``: no longer in the player's
process group or session), which writes its pid to PIDFILE (written whole, then renamed into place) and
sleeps (at most 60 s, so that even a helper left behind ends on its own). Then it serves as
``renderd-player`` does, and exits 0 on its own once the file TRIGGER exists: its helper, orphaned, is then no
longer its descendant.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time

HELPER_LIFETIME = 60.0


def argv(pidfile: str, trigger: str) -> list[str]:
    """The executable (an argv list) for ``renderd.launch``."""
    return [sys.executable, os.path.abspath(__file__), pidfile, trigger]


def _daemonise(pidfile: str) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pidfile + ".tmp", pidfile)
            time.sleep(HELPER_LIFETIME)
        os._exit(0)
    os.wait()


def _exit_on(trigger: str) -> None:
    while not os.path.exists(trigger):
        time.sleep(0.02)
    os._exit(0)


def main() -> None:
    pidfile, trigger, *rest = sys.argv[1:]
    _daemonise(pidfile)
    threading.Thread(target=_exit_on, args=(trigger,), daemon=True).start()
    sys.argv = ["renderd-player", *rest]
    runpy.run_module("renderd.player", run_name="__main__")


if __name__ == "__main__":
    main()
