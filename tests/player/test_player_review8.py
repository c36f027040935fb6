"""Review 8 of the reference player: each test drives a real player process over real FIFOs."""

from __future__ import annotations

import pytest

from renderd.protocol import encode_action
from tests.helpers.fifo_driver import PlayerExited

FAST = ["-screen-width", "16", "-screen-height", "16"]
#: Deadline for a prompt answer or exit (seconds).
PROMPT = 10.0


def ready(spawn, *args, **kwargs):
    p = spawn([*FAST, *args], **kwargs)
    p.start_session()
    return p


@pytest.mark.parametrize("next_action", [{"action": "Pass"}, {"action": "Pass", "sequenceId": 2**64},
                                         {"action": "Bogus"}])
def test_counting_on_past_the_largest_sequence_id_is_not_a_crash(spawn, next_action):
    # The largest sequenceId the player adopts is 2**64 - 1; an action after it without a usable
    # sequenceId (none, or one beyond 64 bits, which is refused) made the player count on to 2**64,
    # which msgpack cannot pack: the player died with exit code 3 instead of answering.
    p = ready(spawn)
    ev = p.step("Pass", sequenceId=2**64 - 1)
    assert ev and ev.sequence_id == 2**64 - 1
    p.send_raw_buffers(encode_action(next_action))
    try:
        ev = p.recv_event(timeout=PROMPT)
    except PlayerExited:
        pytest.fail(f"the player exited ({p.wait(PROMPT)}): {p.log_text()[-800:]}")
    assert ev.sequence_id == 0  # counted on, wrapping as an unsigned 64-bit number does
    assert ev.metadata["lastActionSuccess"] == (next_action == {"action": "Pass"})
    assert p.step("Pass", sequenceId=7).sequence_id == 7
    assert p.alive()


def test_a_malformed_first_message_over_http(tmp_path):
    # --fault-at-start garbage with AI2THOR_SERVER_TYPE=WSGI: the player logged "fault at start: garbage" and
    # then posted a good first message, so a boot-failure test over HTTP got a healthy player. It now posts a
    # first frame whose metadata is not JSON, as the per-step garbage fault does over HTTP.
    renderd = pytest.importorskip("renderd")
    from renderd.errors import ProtocolError

    log_path = tmp_path / "player.log"
    with pytest.raises(ProtocolError):
        with renderd.launch(width=16, height=16, transport="http", args=["--fault-at-start", "garbage"],
                            start_timeout=PROMPT, step_timeout=PROMPT, log_path=log_path):
            pass
    assert "malformed first message" in log_path.read_text(encoding="utf-8", errors="replace")

