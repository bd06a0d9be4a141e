"""The job service's parts, built once per process and shared by its faces.

The shard router (``ShardSet``, whose ``call`` is the instrumented seam of
every store call), the control store, the queue config cache, the rate
limiter, the concurrency slots (per queue and per key), the event counters and the admin secret's throttle: state, not
behaviour. The faces that act on a core hold the code: the client API
(``pinlater.service.JobService``, made of the reads and queue-admin
mixins, ``pinlater.engine.reads`` and ``pinlater.engine.admin``), the
operators' API (``pinlater.operators.Operators``) and the server's
coalescer, which makes its batches from these parts with the same steps as
the service (``pinlater.engine.writes``, ``pinlater.engine.settle``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pinlater.engine.batches import EndsTeller
from pinlater.engine.config_cache import QueueConfigCache
from pinlater.engine.control_backoff import ControlBackoff
from pinlater.engine.counters import EventCounters
from pinlater.engine.key_slots import KeySlots
from pinlater.engine.ratelimit import RateLimiter
from pinlater.engine.shards import ShardSet
from pinlater.engine.slots import Slots
from pinlater.kit.secret_throttle import SecretThrottle
from pinlater.observe import tracing
from pinlater.settings import Settings
from pinlater.stores import open_backend, open_control_store
from pinlater.stores.base import ShardBackend
from pinlater.stores.control import ControlStore


@dataclass(frozen=True, eq=False)
class Core:
    settings: Settings
    shards: ShardSet
    control: ControlStore
    configs: QueueConfigCache
    rate_limiter: RateLimiter
    counters: EventCounters
    admin_throttle: SecretThrottle
    slots: Slots
    key_slots: KeySlots
    batch_ends: EndsTeller

    @classmethod
    def build(cls, shards: ShardSet, control: ControlStore, settings: Settings | None = None) -> Core:
        """The parts over these shards and control store; starts probing the shards."""
        settings = settings or Settings()
        settings.read_budget_bytes  # noqa: B018 -- a bad setting fails here, at start, not at the first read
        backoff = ControlBackoff()  # shared: one failing control store, seen by both
        configs = QueueConfigCache(control, settings.config_ttl_s, backoff)
        counters = EventCounters(control)
        shards.seam.count_events(counters)
        shards.on_recover(lambda backend: ensure_queues_on(control, backend))
        shards.on_queue_deleted(lambda backend, queue: revive_on(shards, control, backend, queue))
        shards.start_probing()
        slots = Slots(control, shards)
        core = cls(settings, shards, control, configs, RateLimiter(control, settings.rate_burst_s, backoff), counters,
                   _throttle(settings), slots, KeySlots(control, shards, slots.claims_of), EndsTeller())
        core.batch_ends.bind(core)
        return core

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
        settings.read_budget_bytes  # noqa: B018 -- as in build
        return replace(self, settings=settings, configs=QueueConfigCache(self.control, settings.config_ttl_s),
                       admin_throttle=_throttle(settings))

    def close(self) -> None:
        self.batch_ends.close()  # tells its batches what ACKs ended: needs the stores
        self.slots.close()  # gives back its spare slots: needs the control store
        self.key_slots.close()
        self.counters.close()
        self.shards.close()
        self.control.close()


def _throttle(settings: Settings) -> SecretThrottle:
    return SecretThrottle(settings.admin_secret_max_failures, settings.admin_secret_max_failures_all,
                          settings.admin_secret_window_s)


# What keeps a shard's queues in step with the control store (hooks of the shard set).
def ensure_queues_on(control: ControlStore, backend: ShardBackend) -> None:
    """A shard that comes back gets storage for queues created while it was down."""
    for config in control.list_queues().values():
        backend.create_queue(config.name, config.priorities)


def revive_on(shards: ShardSet, control: ControlStore, backend: ShardBackend, queue: str) -> bool:
    """A shard answered that ``queue`` was deleted there. If the queue
    exists, it was created again while the shard was down: the shard
    gets its storage now (True). If not, the caller's cached config of
    it was stale (False); the cache keeps it until it expires, as it
    would any other config."""
    config = control.get_queue(queue)  # fresh: no cached or stale config decides this
    if config is None:
        return False
    shards.call(backend, "create_queue", queue, lambda b: b.create_queue(queue, config.priorities))
    return True
