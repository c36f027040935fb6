"""The renderd daemon: configuration-driven supervision of players, leases, and the control API.

Modules: :mod:`~renderd.daemon.supervisor` (the loop that keeps players ready),
:mod:`~renderd.daemon.leases`, :mod:`~renderd.daemon.api` (the WSGI control API),
:mod:`~renderd.daemon.metrics`, :mod:`~renderd.daemon.notify` (sd_notify),
:mod:`~renderd.daemon.service` (the process: directories, lock, socket, signals),
:mod:`~renderd.daemon.commands` (``renderd start`` / ``renderd status``) and
:mod:`~renderd.daemon.client` (``renderd.connect`` and the control client).
"""
