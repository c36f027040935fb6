"""``Session.reset(width=..., height=...)`` against the reference player: a size out of range, or one the
player refuses, is an error and never recorded as the session's size."""

from __future__ import annotations

from typing import Any, Sequence

import pytest

import renderd
from renderd.client import Session
from renderd.player.core import Player
from renderd.player.fifo_link import encode_answer
from renderd.player.renderer import NumpyRenderer
from renderd.protocol import MAX_ACTION_SIZE, MAX_RESOLUTION, NEED_DATA, Decoder, Message, decode_action

#: Deadline for a player's start and each answer in these tests.
DEADLINE = 30.0


def _joined(buffers: Sequence[Any]) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in buffers)


class PlayerChannel:
    """A :class:`~renderd.transport.Channel` onto an in-process :class:`Player`, through the real codec both
    ways (the FIFO link's encoding of answers), so a Session can be given a player with any answer limit."""

    def __init__(self, player: Player) -> None:
        self.player = player
        self.answers = Decoder()
        self.answers.receive_data(_joined(encode_answer(player.first_answer())))

    def send(self, buffers: Sequence[Any], deadline: float, deadline_name: str = "step_timeout") -> None:
        actions = Decoder(max_body_size=MAX_ACTION_SIZE)
        actions.receive_data(_joined(buffers))
        answer = self.player.answer(decode_action(actions.next_message()))
        self.answers.receive_data(_joined(encode_answer(answer)))

    def recv(self, deadline: float, deadline_name: str = "step_timeout") -> Message:
        message = self.answers.next_message()
        assert message is not NEED_DATA, "no answer queued"
        return message

    def close(self) -> None:
        pass


def test_a_size_the_player_refuses_raises_and_is_not_recorded():
    player = Player(width=64, height=48, renderer=NumpyRenderer())
    player.limit_answer_size(player.largest_answer_size(64, 48, 0))  # no larger frame fits this "transport"
    with Session(PlayerChannel(player), width=64, height=48) as session:
        session.wait_ready(DEADLINE)
        with pytest.raises(ValueError, match=r"refused ChangeResolution to 128 x 96: ChangeResolution: .* transport"):
            session.reset("FloorPlan2", width=128, height=96, gridSize=0.5)
        assert (session.width, session.height, session._width, session._height) == (64, 48, 64, 48)
        assert player.grid_size != 0.5  # Initialize was not sent, and its parameters are not kept
        event = session.reset("FloorPlan2")  # the session stays usable
        assert event and event.metadata["lastAction"] == "Initialize" and "gridSize" not in session._init_params
        assert event.frame.shape == (48, 64, 3)


@pytest.mark.parametrize("size", [{"width": MAX_RESOLUTION + 1}, {"width": 0}, {"height": -5}])
def test_a_size_out_of_range_raises_before_anything_is_sent(size):
    with renderd.launch(width=64, height=48, start_timeout=DEADLINE, step_timeout=DEADLINE) as session:
        before = session.sequence_id
        with pytest.raises(ValueError, match=f"must be an integer 1..{MAX_RESOLUTION}.*nothing was sent"):
            session.reset("FloorPlan2", **size)
        assert session.sequence_id == before and session.last_event.metadata["sceneName"] == "FloorPlan1"
        assert (session.width, session.height) == (64, 48)
        event = session.reset("FloorPlan2", width=80, height=60)
        assert event and event.frame.shape == (60, 80, 3) and (session.width, session.height) == (80, 60)
