"""One typed settings object for the feed tasks, reads and endpoint, from
the environment:

| variable | default | meaning |
|---|---|---|
| ``PINLATER_FEED_PAGE_SIZE`` | 1000 | followers per fan-out job (one page, one write per cluster) |
| ``PINLATER_FEED_HUGE_FOLLOWERS`` | 100000 | accounts with more followers fan out at priority 3 |
| ``PINLATER_FEED_RECENT_PINS`` | 200 | pins a follow adds (an unfollow removes) |
| ``PINLATER_FEED_CAP`` | 1000 | longest feed kept (newest first) |
| ``PINLATER_FEED_TRIM_SLACK`` | 100 | a fan-out enqueues a trim for a row over cap + slack |
| ``PINLATER_FEED_TRIM_SAMPLE`` | 4 | rows per fan-out page checked against that limit |
| ``PINLATER_FEED_SWEEP_ROWS`` | 100 | long rows found per sweep job |
| ``PINLATER_FEED_SWEEP_INTERVAL_S`` | 3600 | how often ``celery beat`` starts a sweep (0: never) |
| ``PINLATER_FEED_READ_CUTOFF_MS`` | 50 | a read asks the standby too after this long (near the primary's p99.9) |
| ``PINLATER_FEED_SHADOW_SHARE`` | 0.05 | share of reads also sent to the standby, answer dropped |
| ``PINLATER_FEED_HTTP`` | ``127.0.0.1:8090`` | where ``pinlater-feeds serve`` listens |

Read by ``pinlater.envsettings``: a blank variable is unset, and a bad
value is a ``SettingError`` (``FeedSettingError``) naming its variable in
one line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pinlater.envsettings import SettingError, parse_address, read, real_number, whole_number
from tasks.appdata.mappings import MAX_PAGE
from tasks.hbase.settings import Address

FeedSettingError = SettingError  # the name it had before every setting shared one error type


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
    http: Address = Address("127.0.0.1", 8090)

    @property
    def trim_threshold(self) -> int:
        """A fan-out enqueues a trim for a row with more columns than this."""
        return self.cap + self.trim_slack

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FeedSettings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            page_size=read(env, "PINLATER_FEED_PAGE_SIZE", whole_number(1, MAX_PAGE), d.page_size),
            huge_followers=read(env, "PINLATER_FEED_HUGE_FOLLOWERS", whole_number(0, 2**62), d.huge_followers),
            recent_pins=read(env, "PINLATER_FEED_RECENT_PINS", whole_number(1, MAX_PAGE), d.recent_pins),
            cap=read(env, "PINLATER_FEED_CAP", whole_number(1, 1_000_000), d.cap),
            trim_slack=read(env, "PINLATER_FEED_TRIM_SLACK", whole_number(0, 1_000_000), d.trim_slack),
            trim_sample=read(env, "PINLATER_FEED_TRIM_SAMPLE", whole_number(0, MAX_PAGE), d.trim_sample),
            sweep_rows=read(env, "PINLATER_FEED_SWEEP_ROWS", whole_number(1, 10_000), d.sweep_rows),
            sweep_interval_s=read(env, "PINLATER_FEED_SWEEP_INTERVAL_S", real_number(0, 365 * 86400),
                                  d.sweep_interval_s),
            read_cutoff_ms=read(env, "PINLATER_FEED_READ_CUTOFF_MS", real_number(0, 60_000), d.read_cutoff_ms),
            shadow_share=read(env, "PINLATER_FEED_SHADOW_SHARE", real_number(0, 1), d.shadow_share),
            http=read(env, "PINLATER_FEED_HTTP", lambda text: Address(*parse_address(text)), d.http),
        )
