"""launch() that times out waiting for the first frame: what its error tells the caller."""

from __future__ import annotations

import psutil
import pytest

import renderd
from renderd.errors import PlayerTimeout

from tests.client.conftest import live_children


def test_a_launch_timeout_quotes_the_log_and_does_not_ask_to_close_a_session_it_never_returned(tmp_path):
    # launch() stops the player when no first frame comes in time, and there is no session to close: the
    # error must not say the player "is still running" and to "close" the session, and, as a crash's does,
    # it quotes what the player wrote to its log.
    script = tmp_path / "slow-player"
    script.write_text("#!/bin/sh\necho 'loading 4 GB of assets'\nexec sleep 30\n")
    script.chmod(0o755)
    with pytest.raises(PlayerTimeout) as info:
        renderd.launch([str(script)], platform="headless", start_timeout=0.5)
    message = str(info.value)
    assert "loading 4 GB of assets" in message, message
    assert "close it" not in message and "still running" not in message, message
    assert "start_timeout" in message and info.value.deadline == "start_timeout"
    assert not live_children(), "the player outlived the failed launch"
    assert not any(p.info["cmdline"] and str(script) in " ".join(p.info["cmdline"])
                   for p in psutil.process_iter(["cmdline"]))
