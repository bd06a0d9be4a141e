"""How big the scale tests run: ``PINLATER_SCALE_FOLLOWERS`` followers of one
account (20,000 in ``make test``, which pages through them the same way;
``make soak`` runs them at 100,000)."""

from __future__ import annotations

import os

FOLLOWERS = int(os.environ.get("PINLATER_SCALE_FOLLOWERS") or 20_000)
if FOLLOWERS < 2_000:
    raise ValueError(f"PINLATER_SCALE_FOLLOWERS must be at least 2000 (several pages), got {FOLLOWERS}")
