"""A reload whose file names an environment PUT through the control API since gives it the file's definition again:
the reload's log line says so, with the keys it sets back (it said only the keys, as if the file had changed)."""

from __future__ import annotations

import re
import signal
import textwrap
from pathlib import Path

from tests.daemon.conftest import PLAYER, fast_config, wait_for

DEADLINE = 30.0


def _reload(d, before: int) -> str:
    """SIGHUP ``d`` and return the reload's log line of changes once it is written."""
    d.signal(signal.SIGHUP)
    lines = wait_for(lambda: [line for line in d.output().splitlines() if "reload: " in line][before:] or None,
                     DEADLINE, "the reload's log line")
    return lines[0]


def _reload_lines(d) -> int:
    return sum(1 for line in d.output().splitlines() if "reload: " in line)


def test_reload_says_it_replaces_a_declaration_made_through_the_api(daemon):
    d = daemon(fast_config())
    body = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "width": 64, "start_timeout": 20.0}
    d.client.request("PUT", "/v1/environments/demo", body)
    assert d.client.request("GET", "/v1/environments/demo")[1]["source"] == "api"

    line = _reload(d, _reload_lines(d))
    assert "environments.demo is the file's again, replacing its declaration through the control API" in line, line
    assert "environments.demo.width 64 -> 300" in line, line
    env = d.client.request("GET", "/v1/environments/demo")[1]
    assert (env["source"], env["config"]["width"]) == ("file", 300)

    # An environment the file never named, declared through the API, then added to the file as it is.
    extra = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "instances": 0}
    d.client.request("PUT", "/v1/environments/extra", extra)
    text = textwrap.dedent(fast_config()) + textwrap.dedent(f"""
        [environments.extra]
        executable = ["{PLAYER}", "--static-frame"]
        platform = "headless"
        instances = 0
        """)
    Path(d.config_path).write_text(text)
    line = _reload(d, _reload_lines(d))
    assert re.search(r"environments\.extra is the file's now, replacing its declaration through the control API "
                     r"\(the same\)", line), line
    assert d.client.request("GET", "/v1/environments/extra")[1]["source"] == "file"
