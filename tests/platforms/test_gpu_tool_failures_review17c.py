"""A GPU tool that keeps failing (an nvidia-smi that hangs until its deadline, or exits with an NVML error) is not run
at every check: a second failure in a row is reused briefly, keyed as outputs are; a fixed tool is run again once
that expires, or at once after clear_cache() (a daemon reload). Stand-in tools: real executables on PATH (no NVIDIA
GPU can exist here)."""

from __future__ import annotations

import os
import stat

import pytest

from renderd.platforms import gpus

GPU_LINE = "GPU 0: NVIDIA A100 (UUID: GPU-5d5ba0d6-1111-2222-3333-444455556666)"


@pytest.fixture
def tool(tmp_path, monkeypatch):
    """A fake nvidia-smi whose behaviour the file ``mode`` sets (``hang``, ``fail`` or ``ok``) and that notes each
    run in ``runs``; returns (set_mode, runs, env)."""
    runs = tmp_path / "runs"
    mode = tmp_path / "mode"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo run >> '{runs}'\n"
        f"case \"$(cat '{mode}')\" in\n"
        "  hang) exec sleep 600 ;;\n"
        "  fail) echo 'Failed to initialize NVML: Driver/library version mismatch'; exit 18 ;;\n"
        f"  *) echo '{GPU_LINE}' ;;\n"
        "esac\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(gpus, "GPU_TOOL_TIMEOUT", 0.5)
    monkeypatch.setattr(gpus, "GPU_TOOL_DRAIN_TIMEOUT", 0.2)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}

    def set_mode(value: str) -> None:
        mode.write_text(value)

    def count() -> int:
        return len(runs.read_text().splitlines()) if runs.exists() else 0

    gpus.clear_cache()
    yield set_mode, count, env
    gpus.clear_cache()


def test_a_hanging_nvidia_smi_costs_one_timeout_per_interval_not_one_per_check(tool, monkeypatch):
    set_mode, runs, env = tool
    set_mode("hang")
    first = gpus.nvidia_survey(env)
    assert first[0] == [] and "did not answer within 0.5 s" in first[1]
    # The first failure is not reused (a tool slow once is asked again); the second in a row is.
    second = gpus.nvidia_survey(env)
    assert second[0] == [] and "2 times in a row" in second[1], second
    assert runs() == 2
    for _ in range(5):
        assert gpus.nvidia_survey(env) == second
    assert runs() == 2, "a tool that failed twice in a row was run again at every check"
    # Fixed (a driver reloaded: the tool on disk is the same): once the short reuse expires, it is run again.
    set_mode("ok")
    monkeypatch.setattr(gpus, "GPU_TOOL_FAILURE_CACHE_SECONDS", 0.0)
    devices, problem = gpus.nvidia_survey(env)
    assert problem is None and [d.name for d in devices] == ["NVIDIA A100"]
    assert runs() == 3


def test_an_nvidia_smi_error_exit_is_reused_too_and_keyed_by_environment(tool):
    set_mode, runs, env = tool
    set_mode("fail")
    for _ in range(4):
        devices, problem = gpus.nvidia_survey(env)
        assert devices == [] and "Driver/library version mismatch" in problem
    assert runs() == 2
    # Another CUDA_VISIBLE_DEVICES is another key, as for outputs: its own first failure runs the tool.
    gpus.nvidia_survey(dict(env, CUDA_VISIBLE_DEVICES="0"))
    assert runs() == 3


def test_a_success_ends_the_run_of_failures_and_clear_cache_forgets_failures(tool, monkeypatch):
    set_mode, runs, env = tool
    monkeypatch.setattr(gpus, "GPU_TOOL_CACHE_SECONDS", 0.0)  # outputs expire at once: every check runs the tool
    set_mode("fail")
    gpus.nvidia_survey(env)
    set_mode("ok")
    assert gpus.nvidia_survey(env)[1] is None
    set_mode("fail")
    gpus.nvidia_survey(env)  # a first failure again: not reused
    problem = gpus.nvidia_survey(env)[1]
    assert runs() == 4 and "2 times in a row" in problem
    gpus.nvidia_survey(env)
    assert runs() == 4
    # What a reload of the daemon does: the failure is forgotten, the next check runs the tool.
    set_mode("ok")
    gpus.clear_cache()
    assert gpus.nvidia_survey(env)[1] is None
    assert runs() == 5
