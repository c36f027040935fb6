"""renderd start -c with a relative path: made absolute, as docs/configuration.md says of every path given on the
command line, so a refused reload names the file by a path that means something away from the daemon's working
directory (GET /v1/health's `reload`, renderd status)."""

from __future__ import annotations

import os
import signal
import textwrap

from tests.daemon.conftest import fast_config, wait_for


def test_a_relative_config_path_is_named_absolute_by_a_refused_reload(daemon, tmp_path):
    config = tmp_path / "relative.toml"
    config.write_text(textwrap.dedent(fast_config(instances=0)))
    relative = os.path.relpath(config)  # the daemon runs in this process's working directory
    assert not os.path.isabs(relative)
    d = daemon(None, args=("-c", relative))
    config.write_text("[environments.demo]\nwidth = 0\n")
    d.signal(signal.SIGHUP)
    reload = wait_for(lambda: (d.health() or {}).get("reload"), 10.0, "the reload's outcome")
    assert reload["ok"] is False, reload
    assert reload["error"].startswith(f"{config}:2: environments.demo.width"), reload
