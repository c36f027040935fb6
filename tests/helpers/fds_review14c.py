"""Descriptor numbers a close() frees under a call still using them: what a number refers to, and new files opened
until they have taken the freed numbers (which a call that went on using the numbers would then poll, read or write
in the closed file's place)."""

from __future__ import annotations

import os
from pathlib import Path

#: At most how many files a test opens to take the numbers of descriptors closed under a call.
MOST_FILES = 256


def fd_target(fd: int) -> str:
    """What descriptor ``fd`` refers to (a pipe whose name close() removed is the same pipe), or "closed"."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        return "closed"


def take_numbers(fds: list[int], opened: list[int], tmp_path: Path, content: bytes = b"x",
                 flags: int = os.O_RDONLY) -> None:
    """Open new files (``content`` in each, opened with ``flags``: read-only, or os.O_WRONLY / os.O_RDWR for a test
    that looks for what a call under it read or wrote there) until they have taken every number in ``fds`` (which
    only a close of those lets them take: a freed number is the lowest free one, and a file takes the lowest free
    number), at most :data:`MOST_FILES`; their descriptors go into ``opened`` (the caller closes them)."""
    for k in range(MOST_FILES):
        if set(fds) <= set(opened):
            break
        path = tmp_path / f"other-{k}"
        path.write_bytes(content)
        opened.append(os.open(path, flags | os.O_CLOEXEC))
