"""The job service's parts, built once per process and shared by its faces.

The shard router (``ShardSet``, whose ``call`` is the instrumented seam of
every store call), the control store, the queue config cache, the rate
limiter, the event counters, and the reads (``Inspector``) and queue
administration (``QueueAdmin``) over them. The faces are built on a core:
the client API (``pinlater.service.JobService``), the operators' API
(``pinlater.operators.Operators``) and the server's coalescer, which makes
its batches from these parts with the same steps as the service
(``pinlater.engine.writes``, ``pinlater.engine.settle``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pinlater.engine.config_cache import QueueConfigCache
from pinlater.engine.counters import EventCounters
from pinlater.engine.inspection import Inspector
from pinlater.engine.queue_admin import QueueAdmin
from pinlater.engine.ratelimit import RateLimiter
from pinlater.engine.shards import ShardSet
from pinlater.observe import tracing
from pinlater.settings import Settings
from pinlater.stores import open_backend, open_control_store
from pinlater.stores.control import ControlStore


@dataclass(frozen=True, eq=False)
class Core:
    settings: Settings
    shards: ShardSet
    control: ControlStore
    configs: QueueConfigCache
    rate_limiter: RateLimiter
    counters: EventCounters
    inspector: Inspector
    admin: QueueAdmin

    @classmethod
    def build(cls, shards: ShardSet, control: ControlStore, settings: Settings | None = None) -> Core:
        """The parts over these shards and control store; starts probing the shards."""
        settings = settings or Settings()
        configs = QueueConfigCache(control, settings.config_ttl_s)
        counters = EventCounters(control)
        inspector = Inspector(shards, configs, settings)
        admin = QueueAdmin(shards, control, configs, inspector, settings)
        shards.seam.count_events(counters)
        shards.on_recover(admin.ensure_queues_on)
        shards.on_queue_deleted(admin.revive_on)
        shards.start_probing()
        return cls(settings, shards, control, configs, RateLimiter(control, settings.rate_burst_s), counters,
                   inspector, admin)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Core:
        settings = settings or Settings.from_env()
        tracing.configure()
        backends = [open_backend(spec, settings.socket_timeout_s) for spec in settings.shards]
        shards = ShardSet(backends, settings.health_probe_interval_s)
        control = open_control_store(settings.resolved_control_url, settings.socket_timeout_s)
        return cls.build(shards, control, settings)

    def sibling(self, settings: Settings | None = None) -> Core:
        """Another client of the same stores and counters with caches of its
        own, as another process has (and other settings, if given); closing
        either closes both."""
        settings = settings or self.settings
        configs = QueueConfigCache(self.control, settings.config_ttl_s)
        inspector = Inspector(self.shards, configs, settings)
        admin = QueueAdmin(self.shards, self.control, configs, inspector, settings)
        return replace(self, settings=settings, configs=configs, inspector=inspector, admin=admin)

    def close(self) -> None:
        self.counters.close()
        self.shards.close()
        self.control.close()
