"""The reference player, with extra arguments while a marker file exists: players started after a test
creates the marker (a crashed slot's replacements) behave differently from those started before.

    [sys.executable, marker_player.py, MARKER, "--fault-at-start hang", <the player's own arguments>...]

The second argument is split on spaces and inserted before the player's own arguments when ``MARKER``
exists. The player is exec'd in place, so its pid is this process's.
"""

from __future__ import annotations

import os
import sys


def argv(marker: str, extra: str) -> list[str]:
    """The executable (an argv list) for ``renderd.launch``/``launch_many``."""
    return [sys.executable, os.path.abspath(__file__), marker, extra]


def main() -> None:
    marker, extra, *rest = sys.argv[1:]
    args = extra.split() if os.path.exists(marker) else []
    os.execv(sys.executable, [sys.executable, "-m", "renderd.player", *args, *rest])


if __name__ == "__main__":
    main()
