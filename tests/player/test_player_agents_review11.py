"""Several agents, as an AI2-THOR build has them: ``Initialize`` with ``agentCount`` makes them, actions name one
with ``agentId``, and every answer carries every agent's metadata and frames (in agent order), which renderd's
client hands out as ``event.events``. Real player processes, driven by renderd's client (FIFO and HTTP) and by
AI2-THOR's own FifoServer."""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import weakref

import msgpack
import numpy as np
import pytest

import renderd
from renderd.player.core import MAX_AGENTS, VIEW_CACHE_SIZE, Player
from renderd.player.renderer import NumpyRenderer, RenderState
from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT, SCENES
from renderd.protocol import FieldType, encode_metadata
from tests.helpers.fifo_driver import player_command

W, H = 64, 48
DEADLINE = 30.0
#: Where a build's AgentManager puts agents 1 and 2 of FloorPlan1 (agent 0 at the start, (0, -2)): on points 5
#: and 6 of the free positions 0.5 m (2 x gridSize) apart reachable from agent 0, breadth first, +x, +z, -x, -z.
PLACED = [(0.0, -2.0), (1.0, -2.0), (0.5, -1.5)]


@pytest.fixture(scope="module")
def session():
    """One FIFO session shared by the module's tests (each starts with its own Reset and Initialize)."""
    with renderd.launch(width=W, height=H, start_timeout=DEADLINE, step_timeout=DEADLINE) as s:
        yield s


def initialize(session, agents: int = 2, **kwargs):
    assert session.step({"action": "Reset", "sceneName": "FloorPlan1", "sequenceId": 0})
    event = session.step("Initialize", agentCount=agents, renderDepthImage=True, renderInstanceSegmentation=True,
                         **kwargs)
    assert event, event.metadata["errorMessage"]
    return event


def position(event) -> tuple[float, float]:
    p = event.metadata["agent"]["position"]
    return p["x"], p["z"]


def expected_view(event):
    """What renderd's renderer draws from this agent's camera, as it reports it: (rgb, depth, ids), top row first."""
    agent = event.metadata["agent"]
    state = RenderState(SCENES["FloorPlan1"], W, H, (agent["position"]["x"], AGENT_Y + CAMERA_HEIGHT,
                        agent["position"]["z"]), agent["rotation"]["y"], agent["cameraHorizon"], event.metadata["fov"])
    return NumpyRenderer().render(state)


def assert_own_view(event):
    rgb, depth, ids = expected_view(event)
    assert np.array_equal(event.frame, rgb)
    assert np.array_equal(event.depth_frame, depth)
    assert np.array_equal(event.instance_segmentation_frame, ids)


def test_initialize_makes_the_agents_a_build_makes_and_agent_id_picks_the_one_that_acts(session):
    # The player refused any agentCount but 1 ("this player has a single agent"), so renderd's multi-agent path
    # (event.events, activeAgentId) could not be run against a real process.
    event = initialize(session, agents=3)
    assert len(event.events) == 3 and event.events[0] is event
    assert [position(e) for e in event.events] == PLACED
    assert [e.metadata["agentId"] for e in event.events] == [0, 1, 2]
    for e in event.events:  # each agent ran the Initialize that made it, as in a build
        assert e.metadata["lastAction"] == "Initialize" and e
        assert e.metadata["actionReturn"] == {"cameraNearPlane": 0.1, "cameraFarPlane": 20.0}
        assert e.metadata["agent"]["rotation"]["y"] == 0 and e.metadata["agent"]["cameraHorizon"] == 0
        assert_own_view(e)
    assert not np.array_equal(event.events[0].frame, event.events[1].frame)

    moved = session.step("MoveAhead", agentId=1)
    assert moved and moved.events[1] is moved and moved.sequence_id == event.sequence_id + 1
    assert position(moved) == (1.0, -1.75) and moved.metadata["lastAction"] == "MoveAhead"
    assert [position(e) for e in moved.events] == [(0.0, -2.0), (1.0, -1.75), (0.5, -1.5)]
    # The others keep what their own last action came to.
    assert [e.metadata["lastAction"] for e in moved.events] == ["Initialize", "MoveAhead", "Initialize"]
    for e in moved.events:
        assert_own_view(e)
    turned = session.step("RotateRight", agentId=2.0)  # an integer written as a float names the agent too
    assert turned.events[2] is turned and turned.metadata["agent"]["rotation"]["y"] == 90
    assert_own_view(turned)
    assert session.step("Pass").events[0].metadata["lastAction"] == "Pass"  # no agentId: agent 0


@pytest.mark.parametrize("agent_id", [3, -1, 2.5 + 1, "1.5", "one", None, [1]])
def test_an_agent_id_that_names_no_agent_is_a_failed_action_agent_0_answers(session, agent_id):
    # A build indexes its agent list with the id (converted by (int)JToken: 3.5 is 4, "1.5" cannot be) and dies of
    # the exception (its emit loop ends: it never answers again); the player answers with a failure instead,
    # changing nothing, as it did for any agentId but 0.
    initialize(session, agents=3)
    event = session.step("MoveAhead", agentId=agent_id)
    assert not event and event.metadata["errorCode"] == "InvalidArgument"
    assert event.metadata["errorMessage"] == f"agentId {agent_id!r} does not name one of the 3 agent(s) (0..2)"
    assert event.events[0] is event and [position(e) for e in event.events] == PLACED


def test_agents_block_each_other(session):
    initialize(session)
    left = session.step("MoveLeft", agentId=1, moveMagnitude=0.8)  # would stand 0.2 m from agent 0 (0.4 needed)
    assert not left and left.metadata["errorMessage"] == (
        "Agent 0 is blocking Agent 1 from moving by (-0.8000, 0.0000, 0.0000).")
    # A build's teleport checks the scene's objects, not the other agents: agent 0 may stand 0.25 m from agent 1.
    onto = session.step("Teleport", agentId=0, position={"x": 0.75, "y": 0.9, "z": -2.0})
    assert onto, onto.metadata["errorMessage"]
    assert [position(e) for e in onto.events] == [(0.75, -2.0), PLACED[1]]
    assert session.step("Teleport", agentId=0, position={"x": 0.0, "y": 0.9, "z": -2.0})
    assert session.step("MoveLeft", agentId=1, moveMagnitude=0.5)  # 0.5 m apart: free


def test_reset_leaves_one_agent_and_initialize_without_agent_count_makes_one(session):
    # A build's Reset loads the scene again, which has one agent (the new AgentManager answers as agent 0); its
    # Initialize makes agentCount agents, 1 when none is given. The one agent's map has its agentId, 0, as a
    # build's AgentManager sets every map's.
    initialize(session)
    reset = session.step({"action": "Reset", "agentId": 1, "sequenceId": 0})
    assert reset and reset.events == [reset] and reset.metadata["lastAction"] == "Reset"
    assert reset.metadata["agentId"] == 0 and position(reset) == PLACED[0]
    assert session.step("MoveAhead", agentId=1).metadata["errorCode"] == "InvalidArgument"
    initialize(session)
    one = session.step("Initialize")
    assert one and one.events == [one] and one.metadata["agentId"] == 0
    # agentCount is a build's ServerAction int field: Json.NET reads "2" as 2 and rounds a fraction to the nearest
    # integer, a tie to the even one (a build takes one under 2 as 1 and one over 6 as 6: see
    # test_player_fidelity_review11.py).
    initialize(session)
    for count, made in ((3.5, 4), (2.5, 2), ("3", 3)):
        rounded = session.step("Initialize", agentCount=count)
        assert rounded, rounded.metadata["errorMessage"]
        assert [e.metadata["agentId"] for e in rounded.events] == list(range(made)), count
    # What Json.NET cannot read into the int field fails as a build answers its exception (errorCode null, the
    # path named); a refused Initialize changes nothing.
    initialize(session)
    for count in ("2.5", None):
        refused = session.step("Initialize", agentCount=count)
        assert not refused and refused.metadata["errorCode"] is None
        assert "Path 'agentCount'." in refused.metadata["errorMessage"]
        assert len(refused.events) == 2
    refused = session.step("Initialize", agentCount=1, agentId=1)  # the acting agent would be gone
    assert not refused and "agentId 1 would name none of the 1 agent(s)" in refused.metadata["errorMessage"]
    assert len(refused.events) == 2 and refused.events[1] is refused
    # renderd's Session.reset, like AI2-THOR's controller, sends its Initialize parameters again at every reset.
    assert len(session.reset("FloorPlan2", agentCount=2).events) == 2
    again = session.reset()
    assert len(again.events) == 2 and again.metadata["sceneName"] == "FloorPlan2"


def test_a_dropped_multi_agent_event_frees_every_agent_s_frames_at_once(session):
    # With the cyclic garbage collector off, reference counts alone must free a step's frames once the client
    # has dropped its event and the session moved on (the assembler keeps only the last message's images).
    initialize(session)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        event = session.step("Pass", agentId=1)
        refs = [weakref.ref(a) for e in event.events
                for a in (e.frame, e.depth_frame, e.instance_segmentation_frame)]
        assert len(refs) == 6
        session.step("Pass")
        del event
        assert [r() for r in refs] == [None] * 6
    finally:
        if was:
            gc.enable()


def test_the_http_link_posts_every_agent_s_images():
    # Over HTTP each agent's images are form parts of the same names (image, image_depth, image_ids), in agent
    # order, as a build's WWWForm posts them; renderd's bridge hands them to the client in that order.
    with renderd.launch(width=W, height=H, transport="http", start_timeout=DEADLINE, step_timeout=DEADLINE) as s:
        event = initialize(s)
        assert [position(e) for e in event.events] == PLACED[:2]
        event = s.step("RotateLeft", agentId=1)
        assert event.events[1] is event and event.metadata["agent"]["rotation"]["y"] == 270
        for e in event.events:
            assert_own_view(e)


def test_ai2thors_fifo_server_reads_the_agents_as_a_multi_agent_event(tmp_path):
    fifo = pytest.importorskip("ai2thor.fifo_server")
    server = fifo.FifoServer(width=W, height=H, timeout=DEADLINE)
    server.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(AI2THOR_SERVER_TYPE=server.server_type, AI2THOR_SERVER_SIDE_SCREENSHOT="True")
    for key, value in server.unity_params().items():
        env["AI2THOR_" + key.upper()] = value
    argv = player_command(["-screen-width", str(W), "-screen-height", str(H)])
    server.unity_proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        server.receive(timeout=DEADLINE)
        server.send({"action": "Initialize", "agentCount": 2, "renderDepthImage": True})
        server.receive(timeout=DEADLINE)
        server.send({"action": "MoveAhead", "agentId": 1})
        event = server.receive(timeout=DEADLINE)
        assert type(event).__name__ == "MultiAgentEvent" and event and len(event.events) == 2
        assert event.metadata["agent"]["position"]["z"] == pytest.approx(-1.75)  # the active agent's
        for e in event.events:
            rgb, depth, _ = expected_view(e)
            assert np.array_equal(e.frame, rgb) and np.array_equal(e.depth_frame, depth)
    finally:
        server.stop()
        server.unity_proc.wait(timeout=DEADLINE)
        server.tmp_dir.cleanup()


# -- the player's answers, in process ---------------------------------------------------------------------

ACTIONS = [
    {"action": "Initialize", "agentCount": 3, "renderDepthImage": True},
    {"action": "Initialize", "agentCount": 2, "agentId": 1},
    {"action": "Pass", "agentId": 2},
    {"action": "MoveAhead", "agentId": 1},
    {"action": "MoveLeft", "agentId": 1, "moveMagnitude": 0.6},
    {"action": "RotateRight", "agentId": 2},
    {"action": "LookDown", "agentId": 0},
    {"action": "GetReachablePositions", "agentId": 1},
    {"action": "Teleport", "agentId": 2, "position": {"x": -1.0, "y": 0.9, "z": -1.0}},
    {"action": "AddThirdPartyCamera", "position": {"x": 1, "y": 2, "z": 0}, "rotation": {"x": 30, "y": 0, "z": 0}},
    {"action": "Pass", "agentId": 7},
    {"action": "NoSuchAction", "agentId": 1},
    {"action": "Reset", "agentId": 1},
    {"action": "Pass"},
]


def _walk(seed: int, steps: int = 150) -> list[dict]:
    rng = random.Random(seed)
    return [dict(rng.choice(ACTIONS)) for _ in range(steps)]


@pytest.mark.parametrize("seed", [1, 2])
def test_cached_answers_of_several_agents_equal_answers_built_from_scratch(seed):
    # The player keeps each agent's metadata per pose (and the frames per camera state): an agent that did not
    # move reuses its view, an agent that did gets a new one, and the packed bytes are what msgpack and JSON
    # make of the dict.
    cached = Player(width=24, height=16, metadata_objects=2)
    fresh = Player(width=24, height=16, metadata_objects=2)
    for action in [*ACTIONS, *_walk(seed)]:
        fresh._views.clear()
        fresh._image_list_key = None
        a = cached.answer(dict(action))
        b = fresh.answer(dict(action))
        metadata = a.metadata()
        assert metadata == b.metadata(), action
        assert len(metadata["agents"]) == len(cached.agents) and metadata["activeAgentId"] == cached.active
        assert [t for t, _ in a.images] == [t for t, _ in b.images], action
        assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(a.images, b.images)), action
        assert a.packed_metadata() == encode_metadata(metadata)
        assert msgpack.unpackb(a.packed_metadata(), raw=False, strict_map_key=False) == metadata
        assert a.json_metadata() == json.dumps(metadata, separators=(",", ":")).encode("utf-8")
        assert len(cached._views) <= VIEW_CACHE_SIZE - 1 + len(cached.agents)
        kinds = [t for t, _ in a.images]
        agents, cameras, depth = len(metadata["agents"]), len(cached.cameras), int(cached.render_depth)
        assert kinds == [FieldType.THIRD_PARTY_IMAGE, *[FieldType.THIRD_PARTY_DEPTH] * depth] * cameras + [
            FieldType.RGB_IMAGE, *[FieldType.DEPTH_IMAGE] * depth] * agents


def test_an_agent_that_did_not_act_keeps_its_view():
    p = Player(width=16, height=16)
    first = p.answer({"action": "Initialize", "agentCount": 2})
    moved = p.answer({"action": "MoveAhead", "agentId": 1})
    assert moved._views[0] is first._views[0] and moved._views[1] is not first._views[1]
    assert moved._outcomes[0] is first._outcomes[0]  # packed once, not again for every answer


def test_several_agents_must_fit_the_transport():
    # Every agent adds a frame of each image type and its own metadata: an Initialize after which an answer
    # could be over the transport's limits is refused, changing nothing.
    p = Player(width=64, height=64)
    p.limit_answer_size(p.largest_answer_size(64, 64, 0, agents=2))
    assert p.answer({"action": "Initialize", "agentCount": 2})
    refused = p.answer({"action": "Initialize", "agentCount": 3}).metadata()["agents"]
    assert len(refused) == 2 and "with 0 third-party camera(s) and 3 agents" in refused[0]["errorMessage"]
    assert not p.answer({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
                         "rotation": {"x": 90, "y": 0, "z": 0}}).metadata()["agents"][0]["lastActionSuccess"]
    p = Player(width=16, height=16, metadata_objects=1000)
    p.limit_metadata_size(3 * 1024 * 1024)
    assert p.answer({"action": "Initialize", "agentCount": 2})
    refused = p.answer({"action": "Initialize", "agentCount": 3}).metadata()["agents"]
    assert len(refused) == 2 and "metadata of 3 agents with 1000 synthetic objects" in refused[0]["errorMessage"]
    assert len(p.answer({"action": "Initialize", "agentCount": 2}).packed_metadata()) < 3 * 1024 * 1024


def test_a_grid_too_coarse_for_the_agents_is_refused():
    p = Player(width=16, height=16)
    refused = p.answer({"action": "Initialize", "agentCount": 2, "gridSize": 2.0}).metadata()["agents"]
    assert len(refused) == 1 and refused[0]["errorCode"] == "InvalidArgument"
    assert "room for only 1 of the 2 agents" in refused[0]["errorMessage"] and p.grid_size == 0.25
    fine = p.answer({"action": "Initialize", "agentCount": MAX_AGENTS, "gridSize": 0.05}).metadata()["agents"]
    spots = [(a["agent"]["position"]["x"], a["agent"]["position"]["z"]) for a in fine]
    assert all((x - u) ** 2 + (z - v) ** 2 >= 0.4 ** 2 - 1e-9 for i, (x, z) in enumerate(spots)
               for (u, v) in spots[:i])
