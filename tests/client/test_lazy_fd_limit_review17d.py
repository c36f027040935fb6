"""`renderd.launch` (a name imported on first use) in a process at its open-file limit: a RenderdError that says so
and what to do, not the import machinery's raw OSError; the name loads once a descriptor is free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import renderd

LAZY_AT_LIMIT = r"""
import json, os, resource
import renderd

low = os.dup(0)
os.close(low)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
try:
    renderd.launch
except Exception as exc:
    outcome = {"type": type(exc).__name__, "renderd": isinstance(exc, renderd.RenderdError), "message": str(exc)}
else:
    outcome = {"type": None}
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
outcome["after"] = callable(renderd.launch)
print(json.dumps(outcome))
"""


def test_a_lazy_name_at_the_open_file_limit_is_a_clear_renderd_error_and_loads_later():
    root = str(Path(renderd.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", LAZY_AT_LIMIT], capture_output=True, text=True, timeout=60, env=env,
                          cwd=root)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["renderd"], outcome
    assert "renderd.launch" in outcome["message"] and "ulimit -n" in outcome["message"], outcome
    assert outcome["after"], outcome
