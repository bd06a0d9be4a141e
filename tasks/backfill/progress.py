"""Progress of a run (pure): pages done of total, rates over the last
minute, time left, and the state to show."""

from __future__ import annotations

from dataclasses import dataclass

RATE_WINDOW_MS = 60_000


@dataclass(frozen=True, slots=True)
class Progress:
    pages_done: int
    total_pages: int
    users_done: int
    cells: int
    pages_per_s: float | None  # None: too early to say
    users_per_s: float | None
    eta_s: float | None  # None: unknown (no rate yet, or paused)
    state: str  # running | paused, or how the run ended: finished | failed | cancelled

    @property
    def fraction(self) -> float:
        return 1.0 if not self.total_pages else min(1.0, self.pages_done / self.total_pages)


def progress(
    *,
    pages_done: int,
    total_pages: int,
    users_done: int,
    cells: int,
    recent_pages: int,
    recent_users: int,
    started_ms: int,
    now_ms: int,
    ended: str | None,
    paused: bool,
) -> Progress:
    """``recent_*``: pages (and their users) done within ``RATE_WINDOW_MS``
    before ``now_ms``; a run younger than the window is measured over its
    age. ``ended``: how the run ended, or None while it runs."""
    window_s = min(RATE_WINDOW_MS, max(now_ms - started_ms, 0)) / 1000
    pages_rate = users_rate = None
    if window_s >= 1 and ended is None:
        pages_rate, users_rate = recent_pages / window_s, recent_users / window_s
    left = max(total_pages - pages_done, 0)
    eta: float | None = None
    if ended is not None or left == 0:
        eta = 0.0
    elif pages_rate and not paused:
        eta = left / pages_rate
    state = ended or ("paused" if paused else "running")
    return Progress(pages_done, total_pages, users_done, cells, pages_rate, users_rate, eta, state)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def format_rate(rate: float | None, unit: str) -> str:
    return "—" if rate is None else f"{rate:,.1f} {unit}/s"
