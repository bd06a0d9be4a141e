"""The read budget (PINLATER_MAX_READ_BYTES): its default follows the body
size, a value that could not return one body is refused, and the largest
budget's reply still fits a frame the Thrift client accepts."""

from __future__ import annotations

import pytest

from pinlater.limits import FRAME_BODIES, MAX_READ_BYTES, MAX_TIMESTAMP_MS
from pinlater.models import JobInfo
from pinlater.settings import SettingError, Settings
from pinlater.states import JobState
from pinlater.stores.base import CUSTOM_STATUS_MAX
from pinlater.thrift import STRUCTS
from pinlater.thrift.convert import info_to_wire
from pinlater.thrift.framing import REPLY, encode_message
from pinlater.thrift.pool import MAX_REPLY_FRAME
from pinlater.thrift.server import default_max_frame
from pinlater.validation import MAX_LIMIT, MAX_SOURCE_LEN

MIB = 1024 * 1024


def test_the_default_is_the_bodies_of_the_largest_request_frame() -> None:
    assert Settings().read_budget_bytes == FRAME_BODIES * MIB == 16 * MIB
    assert Settings(max_body_bytes=64 * 1024).read_budget_bytes == FRAME_BODIES * 64 * 1024
    # As many bodies as a request frame of the server's default size has room for.
    assert default_max_frame(MIB) - Settings().read_budget_bytes == default_max_frame(0)
    assert Settings(max_body_bytes=64 * MIB).read_budget_bytes == MAX_READ_BYTES


def test_the_variable_sets_it_within_its_bounds() -> None:
    assert Settings.from_env({"PINLATER_MAX_READ_BYTES": "2097152"}).read_budget_bytes == 2 * MIB
    assert Settings.from_env({"PINLATER_MAX_READ_BYTES": " "}).read_budget_bytes == 16 * MIB
    for text in (str(MAX_READ_BYTES + 1), "0", "1e6", "-5"):
        with pytest.raises(SettingError, match=r"^PINLATER_MAX_READ_BYTES: "):
            Settings.from_env({"PINLATER_MAX_READ_BYTES": text})


def test_a_budget_smaller_than_one_body_is_refused_in_one_line() -> None:
    settings = Settings.from_env({"PINLATER_MAX_READ_BYTES": "1000", "PINLATER_MAX_BODY_BYTES": "1001"})
    with pytest.raises(SettingError) as caught:
        settings.read_budget_bytes  # noqa: B018 -- the property checks
    assert str(caught.value) == ("PINLATER_MAX_READ_BYTES: must be at least PINLATER_MAX_BODY_BYTES (1001): "
                                 "a lookup must be able to return any one job's body")
    assert Settings(max_body_bytes=1000, max_read_bytes=1000).read_budget_bytes == 1000


def test_the_largest_budget_and_the_rest_of_the_largest_lookup_fit_the_clients_frame() -> None:
    """Everything but the bodies of a lookup of MAX_LIMIT jobs, each with the
    longest descriptor, custom status and claim there can be, plus the
    largest budget of bodies, is a reply the Thrift client reads."""
    descriptor = f"{'q' * 50}:s{'S' * 32}:p100:{2**63 - 1}"
    info = JobInfo(
        descriptor=descriptor, state=JobState.RUNNING, attempts_allowed=1000, attempts_remaining=1000,
        custom_status="\U0001f600" * CUSTOM_STATUS_MAX, created_at_ms=MAX_TIMESTAMP_MS,
        run_after_ms=MAX_TIMESTAMP_MS, updated_at_ms=MAX_TIMESTAMP_MS,
        claim="0" * 16 + "@" + "\U0001f600" * MAX_SOURCE_LEN, body=b"",
    )
    result = STRUCTS["lookupJobs"][1](success={descriptor: info_to_wire(info)})
    one_job = len(encode_message("lookupJobs", REPLY, 1, result))
    assert MAX_READ_BYTES + MAX_LIMIT * one_job < MAX_REPLY_FRAME
