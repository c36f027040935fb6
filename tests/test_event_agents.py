"""Several agents' events of one step: freed without the cyclic garbage collector, so the decoder's pool
reuses their buffers, while ``event.events`` keeps AI2-THOR's meaning."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import pytest

from renderd.event import Event, FrameAssembler
from renderd.protocol import Decoder, FieldType, encode_message, encode_metadata
from tests.helpers.protocol_review14e import drain, feed_readv, join

W, H = 100, 100  # 30,000-byte RGB bodies: above the decoder's small-body limit, so they come from its pool


def step_bytes(seq: int, agents: int = 2, active: int = 0) -> bytes:
    md = {
        "agents": [
            {"screenWidth": W, "screenHeight": H, "lastAction": "Pass", "lastActionSuccess": True, "x": i}
            for i in range(agents)
        ],
        "sequenceId": seq,
        "activeAgentId": active,
        "thirdPartyCameras": [],
    }
    fields = [(FieldType.METADATA, encode_metadata(md))]
    fields += [(FieldType.RGB_IMAGE, bytes([seq * 10 + i]) * (W * H * 3)) for i in range(agents)]
    return join(encode_message(fields))


def receive(decoder: Decoder, assembler: FrameAssembler, seq: int, **kw) -> Event:
    feed_readv(decoder, step_bytes(seq, **kw), 1 << 20)
    (message,) = drain(decoder)
    return assembler.event(message)


@pytest.fixture
def no_collector():
    """The cyclic garbage collector off: what is freed here is freed by reference counts alone."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was:
        gc.enable()


@pytest.mark.parametrize("active", [0, 1])
def test_a_dropped_multi_agent_event_frees_every_agent_s_frames_at_once(no_collector, active):
    decoder, assembler = Decoder(), FrameAssembler()
    ev = receive(decoder, assembler, 1, active=active)
    assert [int(e.frame[0, 0, 0]) for e in ev.events] == [10, 11]
    frames = [weakref.ref(e.frame) for e in ev.events]
    del ev
    assert [ref() for ref in frames] == [None, None]


def test_a_multi_agent_step_reuses_the_buffers_of_the_step_before(no_collector):
    # Once its event is dropped, a step's buffers take the bodies of the step after next (the assembler keeps
    # the last step's images for a METADATA_PATCH): no new memory, and no page faults, per step. With events
    # that listed each other, every step took new buffers.
    decoder, assembler = Decoder(), FrameAssembler()
    addresses = []
    for seq in (1, 2, 3, 4):
        ev = receive(decoder, assembler, seq)
        assert [int(e.frame[0, 0, 0]) for e in ev.events] == [seq * 10, seq * 10 + 1]
        addresses.append({e.frame.ctypes.data for e in ev.events})
        del ev
    assert addresses[2] == addresses[0] and addresses[3] == addresses[1]


def test_an_event_held_keeps_its_step_s_other_agents():
    decoder, assembler = Decoder(), FrameAssembler()
    second = receive(decoder, assembler, 1).events[1]  # the active event (agent 0) is dropped at once
    for seq in (2, 3):
        receive(decoder, assembler, seq)
    assert [int(e.frame[0, 0, 0]) for e in second.events] == [10, 11]
    assert second.events[1] is second and second.events[0].metadata["x"] == 0
    assert second.events[0].events[1] is second


@pytest.mark.parametrize("active", [0, 1])
def test_events_lists_each_agent_once_with_the_active_one_in_its_place(active):
    ev = receive(Decoder(), FrameAssembler(), 1, agents=3, active=active)
    assert isinstance(ev, Event) and ev.events[active] is ev and len(ev.events) == 3
    assert [e.metadata["x"] for e in ev.events] == [0, 1, 2]
    held = ev.events
    assert all(a is b for a, b in zip(held, ev.events))
    assert bool(ev) and repr(ev).startswith("<renderd.Event seq=1 lastAction='Pass'")


def test_what_a_user_sets_on_another_agent_s_event_stays_with_it():
    # ev.events[1] may be a new object each time nothing holds it; what was set on it stays all the same.
    ev = receive(Decoder(), FrameAssembler(), 1)
    ev.events[1].metadata["mine"] = 5
    ev.events[1].frame = None
    assert ev.events[1].metadata["mine"] == 5 and ev.events[1].frame is None
    assert "mine" not in ev.metadata and ev.frame is not None
    ev.events[1].metadata = {"replaced": True}
    assert ev.events[1].metadata == {"replaced": True} and not ev.events[1]


def test_multi_agent_events_copy_and_pickle_with_their_step():
    ev = receive(Decoder(), FrameAssembler(), 1, active=1)
    ev.metadata  # noqa: B018 - decoded, then copied as it is
    for other in (pickle.loads(pickle.dumps(ev)), copy.deepcopy(ev)):
        assert other is not ev and other.events[1] is other and len(other.events) == 2
        assert [int(e.frame[0, 0, 0]) for e in other.events] == [10, 11]
        assert [e.metadata["x"] for e in other.events] == [0, 1]
        other.events[0].frame[...] = 0
        assert int(ev.events[0].frame[0, 0, 0]) == 10  # a deep copy shares no buffer


def test_a_patch_after_a_multi_agent_step_reuses_its_images():
    decoder, assembler = Decoder(), FrameAssembler()
    first = receive(decoder, assembler, 1)
    patch = encode_message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 1, "x": 7}))])
    feed_readv(decoder, join(patch), 1 << 20)
    (message,) = drain(decoder)
    ev = assembler.event(message, sequence_id=2)
    assert ev.metadata["x"] == 7 and ev.events[1] is ev and ev.events[0].metadata["x"] == 0
    assert [int(e.frame[0, 0, 0]) for e in ev.events] == [10, 11]
    assert first.events[1].metadata["x"] == 1
