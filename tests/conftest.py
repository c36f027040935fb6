"""Settings for the whole suite."""

from __future__ import annotations

import os

#: Most tests wait on real players, displays and daemons rather than compute, but each of those processes needs
#: a CPU to start: one worker per CPU this run may use (measured on 2 CPUs: 625 s in one process, 329 s in two).
#: Larger machines are capped, as the suite's deadlines were set for a few busy CPUs, not for dozens of workers.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject.toml's addopts): the CPUs this process may run on, at most MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))
