"""A player that leaves its own process group, run as a launched player's executable:

    [sys.executable, group_leaving_player_review15p.py, IGNORE_TERM (0|1), <the player's own arguments>...]

It moves itself into its parent's process group (``setpgid``: another group of the same session, which a
process may join), so signals to the group renderd made for it miss it; with IGNORE_TERM 1 it ignores SIGTERM
too. It then runs ``renderd-player`` as its child (which serves the session, in that same group) and, once the
child has exited, sleeps up to 60 s instead of exiting: only a signal to it ends it sooner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

LIFETIME = 60.0


def argv(ignore_term: bool = False) -> list[str]:
    """The executable (an argv list) for ``renderd.launch``."""
    return [sys.executable, os.path.abspath(__file__), "1" if ignore_term else "0"]


def main() -> None:
    ignore_term, *rest = sys.argv[1:]
    os.setpgid(0, os.getpgid(os.getppid()))
    if ignore_term == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # (the child gets SIGTERM's default back: it is the player and exits on it, as it would anyway)
    subprocess.run([sys.executable, "-m", "renderd.player", *rest],
                   preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    time.sleep(LIFETIME)


if __name__ == "__main__":
    main()
