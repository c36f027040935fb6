"""Prometheus metrics of the daemon (``GET /metrics``), on a registry of its own.

Counters and the lease-wait histogram are updated where things happen; player and lease gauges are
read from the supervisor at scrape time, so they can never drift from the real state. The series of an
environment that is gone are exported with their last values for GONE_SERIES_TTL more, then dropped (one
declared again under that name later starts from zero), so that environments declared and removed through
the API do not pile up in the registry and in every scrape.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics", "CONTENT_TYPE"]

#: Content type of the Prometheus text exposition format served by ``GET /metrics``.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Seconds the series of an environment that is gone are still exported (with their last values, for the next
#: scrapes to see how it ended) before they are dropped; counted from the first scrape that finds it gone.
GONE_SERIES_TTL = 300.0
#: Lease wait buckets, in seconds: from an idle pool (sub-millisecond) to a cold start of a Unity build.
LEASE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily]:
        snap = self._snapshot()
        players = GaugeMetricFamily(
            "renderd_players",
            "Player slots by environment and state, as renderd status shows them (one about to start while its "
            "environment's platform is selected is STARTING).",
            labels=["environment", "state"],
        )
        leases = GaugeMetricFamily("renderd_leases_active", "Leases currently held.", labels=["environment"])
        wanted = GaugeMetricFamily(
            "renderd_players_wanted", "Players each environment is reconciled toward.", labels=["environment"]
        )
        for name, env in snap.items():
            for state, count in env["states"].items():
                players.add_metric([name, state], count)
            leases.add_metric([name], env["leases"])
            wanted.add_metric([name], env["wanted"])
        yield players
        yield leases
        yield wanted


class Metrics:
    """The daemon's metrics. ``snapshot`` returns ``{environment: {"states": {STATE: n}, "leases": n,
    "wanted": n}}`` and is called at each scrape."""

    def __init__(self, snapshot: Callable[[], dict]) -> None:
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._gone_since: dict[str, float] = {}  # environments gone, since the first scrape that found them gone
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["environment"]
        self.restarts = Counter(
            "renderd_player_restarts",
            "Players started again after they exited or failed to start, counted once the new process has started.",
            labels,
            registry=self.registry,
        )
        self.boot_failures = Counter(
            "renderd_player_boot_failures",
            "Players that failed to boot: exited or sent an undecodable first frame before readiness, sent no first "
            "frame within start_timeout, or could not be started (the program, or no platform for it).",
            labels,
            registry=self.registry,
        )
        self.crashes = Counter(
            "renderd_player_exits", "Players that exited without being asked to, by how.", labels + ["how"],
            registry=self.registry,
        )
        self.recycles = Counter(
            "renderd_player_recycles",
            "Players replaced because a lease left their pipes out of step (an unclean end, bytes left in them, "
            "an answer that came after the release).",
            labels,
            registry=self.registry,
        )
        self.idle_failures = Counter(
            "renderd_player_idle_failures",
            "Idle players stopped and restarted, by how: health_check (no answer in time, or a wrong one), "
            "closed_pipe (it closed server.pipe), unasked_output (it wrote before any action was sent).",
            labels + ["how"],
            registry=self.registry,
        )
        self.leases = Counter("renderd_leases", "Leases granted.", labels, registry=self.registry)
        self.lease_ends = Counter(
            "renderd_lease_ends", "Leases ended, by how (released, unclean, client_exited, player_exited, stopped).",
            labels + ["how"], registry=self.registry,
        )
        self.lease_timeouts = Counter(
            "renderd_lease_timeouts", "Lease requests that found no ready player in time.", labels,
            registry=self.registry,
        )
        self.lease_wait = Histogram(
            "renderd_lease_wait_seconds", "Time a lease request waited for a ready player.", labels,
            buckets=LEASE_WAIT_BUCKETS, registry=self.registry,
        )
        self.registry.register(_StateCollector(snapshot))
        #: The metrics updated by environment, with their label names (the environment's first).
        self._by_environment: list[tuple[Any, tuple[str, ...]]] = [
            (metric, tuple(names)) for metric, names in (
                (self.restarts, labels), (self.boot_failures, labels), (self.crashes, labels + ["how"]),
                (self.recycles, labels), (self.idle_failures, labels + ["how"]), (self.leases, labels),
                (self.lease_ends, labels + ["how"]), (self.lease_timeouts, labels), (self.lease_wait, labels),
            )
        ]

    def declare(self, environment: str) -> None:
        """Create an environment's series at zero, so they are scraped before anything happens."""
        for metric in (self.restarts, self.boot_failures, self.recycles, self.leases, self.lease_timeouts,
                       self.lease_wait):
            metric.labels(environment)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (after dropping the series of environments gone)."""
        self._forget_gone()
        return generate_latest(self.registry)

    def _forget_gone(self) -> None:
        """Remove the series of environments the supervisor has not had for GONE_SERIES_TTL. The series are
        listed before the supervisor is asked which environments it has: one declared meanwhile (its series
        made at zero) is in its answer."""
        series = set()
        for metric, names in self._by_environment:
            for family in metric.collect():
                for sample in family.samples:
                    series.add((metric, tuple(sample.labels.get(name, "") for name in names)))
        current = set(self._snapshot())
        now = time.monotonic()
        with self._lock:  # (scrapes come from several API threads)
            for name in [n for n in self._gone_since if n in current]:  # declared again
                del self._gone_since[name]
            expired = set()
            for _metric, values in series:
                if values[0] not in current:
                    since = self._gone_since.setdefault(values[0], now)
                    if now - since >= GONE_SERIES_TTL:
                        expired.add(values[0])
            for metric, values in series:
                if values[0] in expired:
                    metric.remove(*values)
            for name in expired:
                del self._gone_since[name]
