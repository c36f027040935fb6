"""renderd.gym's image observations besides RGB and depth (normals, instance and semantic segmentation), through
real reference players."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env

import renderd.gym as rgym
from tests.vector.conftest import SIZE, player_kwargs

IMAGES = {"normals": "normals_frame", "instance_segmentation": "instance_segmentation_frame",
          "semantic_segmentation": "semantic_segmentation_frame"}
CRASH = {"action": "RenderdFault", "fault": "exit", "code": 3}


def _kwargs(**overrides):
    kw = player_kwargs(**overrides)
    kw.pop("args")  # rendered frames: the images follow the view
    return kw


def _image_space():
    return gymnasium.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)


def test_single_env_observes_normals_and_segmentation_and_passes_check_env(no_leaks):
    env = gymnasium.make(rgym.ENV_ID, depth=True, normals=True, instance_segmentation=True,
                         semantic_segmentation=True, **_kwargs())
    try:
        space = env.observation_space
        assert set(space) == {"rgb", "depth", *IMAGES}
        for key in IMAGES:
            assert space[key] == _image_space()
        check_env(env.unwrapped)
        obs, _ = env.reset(seed=0)
        for _ in range(2):
            event = env.unwrapped.last_event
            assert obs in space
            for key, attr in IMAGES.items():
                assert obs[key].flags.c_contiguous and obs[key].base is not getattr(event, attr).base
                assert np.array_equal(obs[key], getattr(event, attr))
            # The player's normals image: the floor and the walls face different ways.
            assert len(np.unique(obs["normals"].reshape(-1, 3), axis=0)) > 1
            obs, *_ = env.step(1)
    finally:
        env.close()


def test_an_image_switch_under_its_older_name_in_init_params_does_not_turn_the_image_off(no_leaks):
    # renderd's client sends renderClassImage's value under renderSemanticSegmentation too: False there turned the
    # image the observation space promises off.
    env = rgym.RenderdEnv(semantic_segmentation=True, instance_segmentation=True,
                          init_params={"renderClassImage": False, "renderObjectImage": False}, **_kwargs())
    try:
        obs, _ = env.reset(seed=0)
        assert np.array_equal(obs["semantic_segmentation"], env.last_event.semantic_segmentation_frame)
        assert np.array_equal(obs["instance_segmentation"], env.last_event.instance_segmentation_frame)
    finally:
        env.close()


def test_vector_env_batches_the_images_also_after_an_autoreset_and_a_replaced_player(no_leaks):
    envs = rgym.RenderdVectorEnv(2, actions=["RotateLeft", CRASH], normals=True, semantic_segmentation=True,
                                 max_episode_steps=2, **_kwargs())
    try:
        assert envs.single_observation_space == gymnasium.spaces.Dict(
            {"rgb": _image_space(), "normals": _image_space(), "semantic_segmentation": _image_space()})
        obs, _ = envs.reset(seed=0)
        replaced = False
        for actions in ([0, 0], [0, 1], [0, 0], [0, 0], [0, 0]):  # autoresets, a crash, its replacement's reset
            assert obs in envs.observation_space
            for i in range(2):
                event = envs._events[i]
                assert np.array_equal(obs["normals"][i], event.normals_frame)
                assert np.array_equal(obs["semantic_segmentation"][i], event.semantic_segmentation_frame)
            obs, _, _, truncated, infos = envs.step(np.array(actions))
            replaced = replaced or bool(infos.get("replaced", [False, False])[1])
        assert replaced
        assert obs in envs.observation_space
    finally:
        envs.close()
