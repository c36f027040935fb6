"""The depth observation stays inside its declared space whatever numbers the player sends: a pixel with no number
(NaN) is taken as beyond max_depth, as an infinite one is (np.clip kept NaN, an observation outside
Box(0, max_depth)). A scripted FIFO player sends the depth on real pipes."""

from __future__ import annotations

import sys

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import renderd.gym as rgym

W, H = 8, 6
#: A player that answers every action with an RGB frame and a float32 depth image (metres) holding NaN, +-inf, a
#: negative number, one beyond max_depth and ordinary ones.
PLAYER = r'''
import json, os, struct, sys
import msgpack
import numpy as np
HEADER = struct.Struct("!BI")
W, H = int(sys.argv[1]), int(sys.argv[2])
depth = np.full((H, W), 1.5, dtype=np.float32)
depth[0, :6] = [np.nan, np.inf, -np.inf, -2.0, 99.0, 0.25]

def message(seq, action):
    agent = {"screenWidth": W, "screenHeight": H, "lastAction": action, "lastActionSuccess": True,
             "errorMessage": "", "depthFormat": "Meters"}
    meta = msgpack.packb({"agents": [agent], "sequenceId": seq, "activeAgentId": 0})
    rgb = bytes(W * H * 3)
    body = depth.tobytes()
    return b"".join([HEADER.pack(1, len(meta)), meta, HEADER.pack(4, len(rgb)), rgb, HEADER.pack(5, len(body)), body,
                     HEADER.pack(255, 0)])

def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data

out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.write(out, message(0, ""))
inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
while True:
    action = None
    while True:
        ftype, length = HEADER.unpack(read_exact(inp, HEADER.size))
        if ftype == 255:
            break
        action = json.loads(read_exact(inp, length))
    answer = message(int(action["sequenceId"]), action["action"])
    view = memoryview(answer)
    while view:
        view = view[os.write(out, view):]
'''


@pytest.fixture
def player(tmp_path):
    script = tmp_path / "depth_player.py"
    script.write_text(PLAYER)
    return [sys.executable, str(script), str(W), str(H)]


def _check(depth: np.ndarray, max_depth: float) -> None:
    # (Each frame: NaN, inf and 99 become max_depth, -inf and -2 become 0, the rest stay; rows may come flipped.)
    assert depth.dtype == np.float32 and not np.isnan(depth).any()
    for frame in depth.reshape(-1, H, W):
        values, counts = np.unique(frame, return_counts=True)
        assert dict(zip(values.tolist(), counts.tolist())) == {0.0: 2, 0.25: 1, 1.5: W * H - 6, max_depth: 3}


def test_single_env_depth_with_nan_stays_in_its_space(no_leaks, player):
    env = rgym.RenderdEnv(depth=True, max_depth=10.0, width=W, height=H, executable=player, start_timeout=30,
                          step_timeout=20)
    try:
        obs, _ = env.reset(seed=0)
        _check(obs["depth"], 10.0)
        assert obs in env.observation_space
        obs = env.step(0)[0]
        _check(obs["depth"], 10.0)
        assert obs in env.observation_space
    finally:
        env.close()


def test_vector_env_depth_with_nan_stays_in_its_space(no_leaks, player):
    envs = rgym.RenderdVectorEnv(2, depth=True, max_depth=10.0, width=W, height=H, executable=player,
                                 start_timeout=30, step_timeout=20)
    try:
        obs, _ = envs.reset(seed=0)
        _check(obs["depth"], 10.0)
        assert obs in envs.observation_space
        obs = envs.step(np.array([0, 1]))[0]
        _check(obs["depth"], 10.0)
        assert obs in envs.observation_space
    finally:
        envs.close()
