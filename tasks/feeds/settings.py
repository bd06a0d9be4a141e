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

Every number is checked on load; a bad one is a ``FeedSettingError``
naming its variable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from tasks.appdata.mappings import MAX_PAGE
from tasks.errors import SettingError
from tasks.hbase.settings import Address


class FeedSettingError(SettingError):
    """A PINLATER_FEED_* variable has a value we cannot use."""


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
        default = cls()

        def whole(name: str, value: int, low: int, high: int) -> int:
            var = f"PINLATER_FEED_{name}"
            text = env.get(var, "").strip()
            if not text:
                return value
            try:
                number = int(text)
            except ValueError:
                raise FeedSettingError(var, f"expected a whole number, got {text!r}") from None
            if not low <= number <= high:
                raise FeedSettingError(var, f"must be {low} to {high}, got {number}")
            return number

        def real(name: str, value: float, low: float, high: float) -> float:
            var = f"PINLATER_FEED_{name}"
            text = env.get(var, "").strip()
            if not text:
                return value
            try:
                number = float(text)
            except ValueError:
                raise FeedSettingError(var, f"expected a number, got {text!r}") from None
            if not math.isfinite(number) or not low <= number <= high:
                raise FeedSettingError(var, f"must be {low:g} to {high:g}, got {text}")
            return number

        http_text = env.get("PINLATER_FEED_HTTP", "").strip()
        try:
            http = Address.parse(http_text, "PINLATER_FEED_HTTP") if http_text else default.http
        except ValueError as exc:
            raise FeedSettingError("PINLATER_FEED_HTTP", str(exc).split(": ", 1)[-1]) from None
        return cls(
            page_size=whole("PAGE_SIZE", default.page_size, 1, MAX_PAGE),
            huge_followers=whole("HUGE_FOLLOWERS", default.huge_followers, 0, 2**62),
            recent_pins=whole("RECENT_PINS", default.recent_pins, 1, MAX_PAGE),
            cap=whole("CAP", default.cap, 1, 1_000_000),
            trim_slack=whole("TRIM_SLACK", default.trim_slack, 0, 1_000_000),
            trim_sample=whole("TRIM_SAMPLE", default.trim_sample, 0, MAX_PAGE),
            sweep_rows=whole("SWEEP_ROWS", default.sweep_rows, 1, 10_000),
            sweep_interval_s=real("SWEEP_INTERVAL_S", default.sweep_interval_s, 0, 365 * 86400),
            read_cutoff_ms=real("READ_CUTOFF_MS", default.read_cutoff_ms, 0, 60_000),
            shadow_share=real("SHADOW_SHARE", default.shadow_share, 0, 1),
            http=http,
        )
