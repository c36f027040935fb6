"""``renderd start`` refuses a runtime or socket directory that is a symlink another user made, wherever it leads
(its maker can point it at a directory of theirs at any moment), as the clients refuse such a socket directory."""

from __future__ import annotations

import os

import pytest

from tests.helpers.daemon_cli_review15m import renderd_start, short_home, wait_for_path

OTHER_UID = 61517  # someone else, who made the symlink


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a symlink owned by another user")
@pytest.mark.parametrize("maker", [OTHER_UID, 0])
@pytest.mark.parametrize("which", ["runtime", "socket"])
def test_a_runtime_dir_that_is_another_users_symlink_is_refused(maker, which):
    with short_home("rs15-") as base:
        target = os.path.join(base, "mine")
        os.mkdir(target, 0o700)  # the service user's own directory: where the link leads passes every check
        link = os.path.join(base, "rt")
        os.symlink(target, link)
        os.lchown(link, maker, maker)
        config = os.path.join(base, "renderd.toml")
        sock = f"{link}/d.sock" if which == "socket" else f"{base}/d.sock"
        runtime = f"{base}/run" if which == "socket" else link
        with open(config, "w") as f:
            f.write(f'[daemon]\nsocket = "{sock}"\n')
        with renderd_start(["-c", config, "--runtime-dir", runtime], text=True) as daemon:
            started = wait_for_path(daemon, sock)
            if maker == OTHER_UID:
                assert not started, "the daemon started behind another user's symlink"
                assert daemon.returncode == 1
                error = daemon.stderr.read()
                assert f"{link} is a symlink made by uid {OTHER_UID}" in error, error
                assert "Traceback" not in error, error
                assert os.listdir(target) == [], "the daemon put something behind the symlink"
            else:  # root's own link (root is the service user here): used
                assert started, daemon.stderr.read()
