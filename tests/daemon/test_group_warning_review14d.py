"""renderd start's warning about a directory that keeps the members of socket_group out: once per directory."""

from __future__ import annotations

import grp
import os

from tests.daemon.conftest import fast_config


def test_a_socket_in_a_runtime_directory_that_keeps_the_group_out_gets_one_warning_for_both(daemon, tmp_path):
    # The socket's directory is the runtime directory (as in the unit: /run/renderd for both): the group
    # warning was logged twice, once as the socket's directory and once as the runtime directory.
    group = grp.getgrgid(os.getgid()).gr_name  # a group this user may give its files
    run = tmp_path / "run"
    run.mkdir()
    os.chmod(run, 0o700)
    d = daemon(fast_config(daemon=f'socket_group = "{group}"'), runtime_dir=str(run),
               socket=str(run / "renderd.sock"))
    lines = [line for line in d.output().splitlines() if "keeps the members of socket_group" in line]
    assert len(lines) == 1, lines
    assert str(run) in lines[0] and "RuntimeDirectoryMode=0750" in lines[0], lines
