"""A reload's clear_caches() while a probe is under way (a GPU tool run, the Vulkan probe, started before the reload on
another thread: a lease request's selection, doctor's survey) does not let that probe's answer, made before the driver
was fixed, be cached after the reload: the next check probes again. Stand-in GPU tool: a real executable on PATH (no
NVIDIA GPU can exist here); the Vulkan probe is the real one (lavapipe), held a moment before it hands its answer back."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from renderd.platforms import clear_caches, gpus, vulkan

DEADLINE = 30.0


def _line(n: int) -> str:
    return f"GPU 0: NVIDIA A100 (UUID: GPU-5d5ba0d6-1111-2222-3333-44445555{n:04d})"


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def tool(tmp_path, monkeypatch):
    """A fake nvidia-smi that reads the file ``out`` (printed; ``fail``: it fails) as it starts, notes each run in
    ``runs`` and, while ``hold`` exists, says ``started`` and waits for ``go`` before it answers."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f"out=$(cat '{tmp_path}/out')\n"
        f"echo run >> '{tmp_path}/runs'\n"
        f"if [ -e '{tmp_path}/hold' ]; then\n"
        f"  : > '{tmp_path}/started'\n"
        "  i=0\n"
        f"  while [ ! -e '{tmp_path}/go' ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\n"
        "fi\n"
        "if [ \"$out\" = fail ]; then echo 'Failed to initialize NVML: Driver/library version mismatch'; exit 18; fi\n"
        "echo \"$out\"\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(gpus, "GPU_TOOL_TIMEOUT", 20.0)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    gpus.clear_cache()
    yield tmp_path, env
    gpus.clear_cache()


def _runs(tmp_path) -> int:
    runs = tmp_path / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def _survey_during_reload(tmp_path, env, before: str, after: str):
    """A survey whose tool read ``before`` and is held while the "driver is fixed" (``after``) and the daemon
    reloads (clear_caches); returns what that survey answered."""
    (tmp_path / "out").write_text(before)
    (tmp_path / "hold").touch()
    answer = []
    survey = threading.Thread(target=lambda: answer.append(gpus.nvidia_survey(env)))
    survey.start()
    try:
        _wait_for((tmp_path / "started").exists, "the tool to start")
        (tmp_path / "out").write_text(after)
        clear_caches()
    finally:
        (tmp_path / "hold").unlink()
        (tmp_path / "go").touch()
        survey.join(DEADLINE)
    assert not survey.is_alive()
    (tmp_path / "started").unlink()
    (tmp_path / "go").unlink()
    return answer[0]


def test_an_output_read_before_a_reload_is_not_cached_after_it(tool):
    tmp_path, env = tool
    devices, note = _survey_during_reload(tmp_path, env, _line(1), _line(2))
    assert note is None and [d.uuid[-4:] for d in devices] == ["0001"]
    # The run began before the reload: the next check runs the tool again and sees the fixed driver.
    devices, note = gpus.nvidia_survey(env)
    assert note is None and [d.uuid[-4:] for d in devices] == ["0002"], devices
    assert _runs(tmp_path) == 2
    # (what was read after the reload is cached as usual)
    assert gpus.nvidia_survey(env) == (devices, None) and _runs(tmp_path) == 2


def test_a_vulkan_probe_answered_before_a_reload_is_not_cached_after_it(monkeypatch):
    real_run = vulkan._run
    answered = threading.Event()
    go = threading.Event()
    calls = []

    def held_run(env, timeout):
        calls.append(threading.get_ident())
        result = real_run(env, timeout)
        if len(calls) == 1:  # the first probe's answer, held until the reload has happened
            answered.set()
            go.wait(DEADLINE)
        return result

    monkeypatch.setattr(vulkan, "_run", held_run)
    env = dict(os.environ)
    vulkan.clear_cache()
    probe = threading.Thread(target=lambda: vulkan.probe_vulkan(env))
    probe.start()
    try:
        assert answered.wait(DEADLINE)
        clear_caches()
    finally:
        go.set()
        probe.join(DEADLINE)
    try:
        assert not probe.is_alive()
        vulkan.probe_vulkan(env)
        assert len(calls) == 2, "the probe answered before the reload was reused after it"
    finally:
        vulkan.clear_cache()
