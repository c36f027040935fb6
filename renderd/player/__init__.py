"""renderd's reference player: a program that speaks the player side of the wire protocol exactly as an
AI2-THOR Unity build does, rendering a small deterministic 3-D room with numpy.

Run it as ``renderd-player`` or ``python -m renderd.player`` (see docs/player.md). As a library:

* :mod:`renderd.player.core` -- :class:`~renderd.player.core.Player`, the transport-free state machine
  (``first_message()`` and ``handle(action)`` return ``(metadata, images)``);
* :mod:`renderd.player.scene` -- the rooms; :mod:`renderd.player.renderer` -- the renderer interface and
  the numpy renderer;
* :mod:`renderd.player.faults` -- fault hooks for tests; :mod:`renderd.player.fifo_link` -- the FIFO
  transport (``renderd.player.http_link`` is the HTTP one).

Importing this package loads nothing heavy.
"""
