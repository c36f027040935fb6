"""The Event an AI2-THOR agent ported to renderd reads: the same attributes give the same values as
AI2-THOR's ``ai2thor.server.Event`` for the same bytes. A real player process on real FIFOs sends the
images the reference player does not (flow, class segmentation, normals); AI2-THOR's own FifoServer reads
the very same bytes for comparison."""

from __future__ import annotations

import importlib.util
import io
import sys
import textwrap
import warnings

import numpy as np
import pytest

import renderd

from .conftest import START

pytestmark = pytest.mark.usefixtures("no_leaks")

W, H = 6, 4

#: A player that answers every action with METADATA, RGB, FLOWS, CLASSES and NORMALS images whose bytes
#: depend on the sequence id. ``message(seq)`` is importable, so the test can hand AI2-THOR the same bytes.
PLAYER = textwrap.dedent(
    f"""
    import json, os, struct, sys
    import msgpack

    W, H = {W}, {H}
    HEADER = struct.Struct("!BI")

    def image(seq, salt, channels=3):
        return bytes((seq * 7 + salt + i) % 251 for i in range(W * H * channels))

    def message(seq, action="Pass"):
        # No actionReturn and no heldObjectPose: what a build that predates them sends.
        agent = {{"screenWidth": W, "screenHeight": H, "lastAction": action, "lastActionSuccess": True,
                  "errorMessage": "", "depthFormat": "Meters", "thirdPartyCameras": None,
                  "colors": [], "objects": []}}
        md = msgpack.packb({{"agents": [agent], "sequenceId": seq, "activeAgentId": 0}})
        fields = [(1, md), (4, image(seq, 1)), (7, image(seq, 2)), (8, image(seq, 3)), (6, image(seq, 4))]
        return b"".join(HEADER.pack(t, len(b)) + b for t, b in fields) + HEADER.pack(255, 0)

    def read_exact(fd, n):
        out = b""
        while len(out) < n:
            data = os.read(fd, n - len(out))
            if not data:
                return None
            out += data
        return out

    def main():
        out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
        os.write(out, message(0))
        inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
        action = None
        while True:
            header = read_exact(inp, HEADER.size)
            if header is None:
                return 0
            ftype, length = HEADER.unpack(header)
            if ftype != 255:
                action = json.loads(read_exact(inp, length))
                continue
            data = memoryview(message(int(action["sequenceId"]), action["action"]))
            while data:
                data = data[os.write(out, data):]

    if __name__ == "__main__":
        sys.exit(main())
    """
)


@pytest.fixture
def player(tmp_path):
    path = tmp_path / "flow_player.py"
    path.write_text(PLAYER)
    spec = importlib.util.spec_from_file_location("flow_player", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [sys.executable, str(path)], module


def thor_event(raw: bytes, sequence_id: int):
    """AI2-THOR's own Event for one whole message."""
    fifo_server = pytest.importorskip("ai2thor.fifo_server")
    server = fifo_server.FifoServer(width=W, height=H, timeout=None)
    try:
        server.server_pipe = io.BytesIO(raw)
        server.sequence_id = sequence_id
        return server.receive()
    finally:
        server.tmp_dir.cleanup()


def test_ai2thors_names_for_flow_and_class_segmentation_give_its_values(player):
    # AI2-THOR's Event stores the flow image in ``flows_frame`` (its ``flow_frame`` stays None) and keeps
    # ``class_segmentation_frame`` (deprecated) for the semantic segmentation image, ``cv2image()``
    # (deprecated) for ``cv2img`` and ``image_data`` (removed: None). Agent code reading them raised
    # AttributeError on a renderd Event.
    argv, module = player
    with renderd.launch(executable=argv, width=W, height=H, start_timeout=START) as session:
        ours = session.step("Pass")
        theirs = thor_event(module.message(ours.sequence_id), ours.sequence_id)
        assert ours.sequence_id == 1
        assert theirs.flow_frame is None and theirs.flows_frame is not None  # AI2-THOR's own layout
        assert np.array_equal(ours.flows_frame, theirs.flows_frame)
        assert np.array_equal(ours.flows_frame, ours.flow_frame)
        with pytest.warns(DeprecationWarning, match="semantic_segmentation_frame"):
            classes = ours.class_segmentation_frame
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert np.array_equal(classes, theirs.class_segmentation_frame)
            assert np.array_equal(ours.cv2image(), theirs.cv2image())
            assert ours.image_data is None and theirs.image_data is None
        with pytest.warns(UserWarning, match="cv2img"):
            ours.cv2image()
        with pytest.warns(UserWarning, match="frame"):
            ours.image_data
        assert np.array_equal(ours.normals_frame, theirs.normals_frame)
        assert np.array_equal(ours.semantic_segmentation_frame, theirs.semantic_segmentation_frame)
        # A later step gives the later frames, as AI2-THOR's names do.
        later = session.step("Pass")
        assert np.array_equal(later.flows_frame, thor_event(module.message(2), 2).flows_frame)
        assert not np.array_equal(later.flows_frame, ours.flows_frame)


def test_an_event_without_flow_has_none_under_either_name():
    with renderd.launch(width=W, height=H, start_timeout=START) as session:
        event = session.step("Pass")
        assert event.flow_frame is None and event.flows_frame is None
        with pytest.warns(DeprecationWarning):
            assert event.class_segmentation_frame is None


def test_a_deprecated_key_whose_stand_in_is_missing_names_both(player):
    # metadata["hand"] stands for "heldObjectPose", metadata["reachablePositions"] (after
    # GetReachablePositions) for "actionReturn"; when the player sent neither, the KeyError named only the
    # stand-in, a key the agent's code never wrote.
    argv, _ = player
    with renderd.launch(executable=argv, width=W, height=H, start_timeout=START) as session:
        metadata = session.step("Pass").metadata
        with pytest.warns(UserWarning, match="heldObjectPose"), pytest.raises(KeyError) as hand:
            metadata["hand"]
        assert "'hand'" in str(hand.value) and "'heldObjectPose'" in str(hand.value)
        metadata = session.step("GetReachablePositions").metadata
        with pytest.warns(UserWarning, match="actionReturn"), pytest.raises(KeyError) as reachable:
            metadata["reachablePositions"]
        assert "'reachablePositions'" in str(reachable.value) and "'actionReturn'" in str(reachable.value)
        with pytest.raises(KeyError) as plain:
            metadata["noSuchKey"]
        assert plain.value.args == ("noSuchKey",)
