"""One typed settings object for the feed tasks, reads and endpoint, from
the ``PINLATER_FEED_*`` variables of ``SETTINGS`` below (listed, with every
other package's, in docs/configuration.md). Read by ``pinlater.kit.envsettings``:
a blank variable is unset, and a bad value is a one-line ``SettingError``
naming its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pinlater.kit.envsettings import Setting, read_fields, real_number, whole_number
from tasks.appdata.mappings import MAX_PAGE
from tasks.hbase.settings import Address


@dataclass(frozen=True, slots=True)
class FeedSettings:
    page_size: int = 1000
    huge_followers: int = 100_000
    recent_pins: int = 200
    cap: int = 1000
    trim_slack: int = 100
    trim_sample: int = 4
    sweep_rows: int = 100
    sweep_interval_s: float = 3600.0
    read_cutoff_ms: float = 50.0
    shadow_share: float = 0.05
    direct_write_ms: float = 1000.0
    http: Address = Address("127.0.0.1", 8090)

    @property
    def trim_threshold(self) -> int:
        """A fan-out enqueues a trim for a row with more columns than this."""
        return self.cap + self.trim_slack

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FeedSettings:
        """Raises SettingError naming the variable at fault."""
        return cls(**read_fields(os.environ if env is None else env, SETTINGS))


SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_FEED_PAGE_SIZE", "page_size", whole_number(1, MAX_PAGE), "1000",
            "followers per fan-out job (one page, one write per cluster)"),
    Setting("PINLATER_FEED_HUGE_FOLLOWERS", "huge_followers", whole_number(0, 2**62), "100000",
            "accounts with more followers fan out at priority 3"),
    Setting("PINLATER_FEED_RECENT_PINS", "recent_pins", whole_number(1, MAX_PAGE), "200",
            "pins a follow adds (an unfollow removes)"),
    Setting("PINLATER_FEED_CAP", "cap", whole_number(1, 1_000_000), "1000",
            "longest feed kept (newest first); the trimming coprocessor's cap too"),
    Setting("PINLATER_FEED_TRIM_SLACK", "trim_slack", whole_number(0, 1_000_000), "100",
            "a fan-out enqueues a trim for a row over cap + slack"),
    Setting("PINLATER_FEED_TRIM_SAMPLE", "trim_sample", whole_number(0, MAX_PAGE), "4",
            "rows per fan-out page checked against that limit"),
    Setting("PINLATER_FEED_SWEEP_ROWS", "sweep_rows", whole_number(1, 10_000), "100",
            "long rows found per sweep job"),
    Setting("PINLATER_FEED_SWEEP_INTERVAL_S", "sweep_interval_s", real_number(0, 365 * 86400), "3600",
            "how often `celery beat` starts a sweep, in seconds (0: never)"),
    Setting("PINLATER_FEED_READ_CUTOFF_MS", "read_cutoff_ms", real_number(0, 60_000), "50",
            "a read asks the standby too after this long (near the primary's p99.9)"),
    Setting("PINLATER_FEED_SHADOW_SHARE", "shadow_share", real_number(0, 1), "0.05",
            "share of reads also sent to the standby, answer dropped"),
    Setting("PINLATER_FEED_DIRECT_WRITE_MS", "direct_write_ms", real_number(0, 60_000), "1000",
            "a fan-out page puts its cells itself if that ends within this, else queues a write job (0: always queue)"),
    Setting("PINLATER_FEED_HTTP", "http", Address.parse, "127.0.0.1:8090",
            "where `pinlater-feeds serve` listens (`--host`, `--port` override its halves)"),
)
