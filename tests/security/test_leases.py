"""A lease is released only by its holder: releasing needs the lease id, a 128-bit random secret the
daemon gives only to the client it granted the lease to and never shows anywhere else."""

from __future__ import annotations

import re

import pytest

from renderd.daemon.client import ControlClient
from renderd.errors import LeaseError, RenderdError

from .conftest import api_outputs


def test_only_the_lease_id_releases_a_lease(secure_daemon) -> None:
    d = secure_daemon
    holder = ControlClient(d.socket)
    other = ControlClient(d.socket)  # another client of the same daemon, without the id
    answer = holder.lease("demo", timeout=10)
    lease_id = answer["lease"]
    try:
        assert re.fullmatch(r"[0-9a-f]{32}", lease_id), lease_id  # 128 random bits
        # Guesses: a wrong id, a prefix, the id of another shape, none at all.
        for guess in ("0" * 32, lease_id[:-1] + ("0" if lease_id[-1] != "0" else "1"), lease_id[:16],
                      str(answer["pid"]), "demo"):
            with pytest.raises(LeaseError) as info:
                other.release(guess)
            assert info.value.status == 404
        for method, path in (("DELETE", "/v1/leases/"), ("DELETE", "/v1/leases"),
                             ("DELETE", "/v1/environments/demo/leases")):
            with pytest.raises(RenderdError) as info:
                other.request(method, path)
            assert info.value.status in (404, 405), (method, path, info.value.status)
        (player,) = d.players("demo")
        assert player["state"] == "LEASED" and player["lease"]["client_pid"] > 0
        # Nobody can learn the id from the daemon: not from status, the API or metrics.
        for where, text in api_outputs(d).items():
            assert lease_id not in text, where
    finally:
        assert holder.release(lease_id)["released"] is True
    with pytest.raises(LeaseError):  # and once ended, the id is worth nothing
        holder.release(lease_id)


def test_lease_ids_are_distinct(secure_daemon) -> None:
    client = ControlClient(secure_daemon.socket)
    ids = set()
    for _ in range(5):
        answer = client.lease("demo", timeout=10)
        ids.add(answer["lease"])
        client.release(answer["lease"])
    assert len(ids) == 5


def test_an_internal_error_on_a_lease_route_does_not_log_the_lease_id(tmp_path) -> None:
    """The control API logs an unexpected error with its request's path; a lease id in that path is the
    holder's secret and is left out."""
    from tests.daemon.conftest import DaemonProcess, fast_config

    preamble = """
    from renderd.daemon import supervisor
    def broken(self, lease_id):
        raise RuntimeError("injected")
    supervisor.Supervisor.lease_status = broken
    """
    d = DaemonProcess(tmp_path, fast_config(), preamble=preamble)
    try:
        d.wait_ready()
        lease = d.client.lease("demo", timeout=10)["lease"]
        with pytest.raises(RenderdError, match="internal error"):
            d.client.lease_status(lease)
        d.client.release(lease)
        assert "control API: GET /v1/leases/" in d.output()
        assert lease not in d.output()
    finally:
        d.cleanup()
