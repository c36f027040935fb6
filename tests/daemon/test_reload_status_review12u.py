"""The last reload's outcome in GET /v1/health and renderd status: a reload refused for a broken file was seen only
in the log (and systemd's status line)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from tests.daemon.conftest import fast_config, wait_for
from tests.helpers.control_review14e import run_renderd


def _reload(d, previous: float | None) -> dict:
    """SIGHUP, and the health's ``reload`` once it is that of this reload."""
    d.signal(signal.SIGHUP)

    def done():
        reload = (d.health() or {}).get("reload")
        return reload if reload and reload["at"] != previous else None

    return wait_for(done, 10.0, "the reload to be reported")


def test_a_failed_reload_is_in_health_and_status_until_one_succeeds(daemon):
    d = daemon(fast_config())
    assert d.health()["reload"] is None  # (none yet)
    before = time.time()
    good = Path(d.config_path).read_text()
    broken = good.replace("instances = 1", "instances = -1")
    Path(d.config_path).write_text(broken)
    line = [text.strip() for text in broken.splitlines()].index("instances = -1") + 1

    failed = _reload(d, None)
    assert failed["ok"] is False and before - 1 <= failed["at"] <= time.time() + 1, failed
    assert failed["error"].startswith(f"{d.config_path}:{line}: environments.demo.instances: must be 0 or more"), failed
    status = run_renderd("status", "--socket", d.socket)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.decode().splitlines()
    assert re.fullmatch(r"reload failed \S+ ago, the running configuration kept: " + re.escape(failed["error"]),
                        lines[1]), lines

    Path(d.config_path).write_text(good)
    ok = _reload(d, failed["at"])
    assert ok["ok"] is True and ok["error"] is None and ok["at"] >= failed["at"], ok
    status = run_renderd("status", "--socket", d.socket).stdout.decode()
    assert "reload" not in status, status
