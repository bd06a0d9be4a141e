"""``TypeaheadSettings`` and ``FeedSettings`` read their environment through
``pinlater.kit.envsettings``: the same kind of value is read, or refused in the
same words, whichever package it configures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pinlater.kit.envsettings import SettingError
from tasks.feeds.settings import FeedSettings
from tasks.hbase.settings import Address
from tasks.typeahead.settings import TypeaheadSettings


def outcome(read: Callable[[], object]) -> object:
    """The value read, or the problem of the SettingError."""
    try:
        return read()
    except SettingError as exc:
        return f"problem: {exc.problem}"


@pytest.mark.parametrize("text", ["25", " 25 ", "²", "٣", "0", "-1", "10001", "9" * 5000, "inf", "1e400", "2.5"])
def test_a_page_size_is_read_alike(text: str) -> None:
    feed = outcome(lambda: FeedSettings.from_env({"PINLATER_FEED_PAGE_SIZE": text}).page_size)
    typeahead = outcome(lambda: TypeaheadSettings.from_env({"PINLATER_TYPEAHEAD_RENAME_PAGE": text}).rename_page)
    assert feed == typeahead
    if text.strip() == "25":
        assert feed == 25
    else:
        assert str(feed).startswith(("problem: expected a whole number", "problem: must be between 1 and 10000"))


@pytest.mark.parametrize("text", ["localhost:9000", " [::1]:9000 ", "127.0.0.1:0", "127.0.0.1:65536", "host:", ":80",
                                  "host:²", "host:٣", "nowhere"])
def test_an_endpoint_address_is_read_alike(text: str) -> None:
    feed = outcome(lambda: FeedSettings.from_env({"PINLATER_FEED_HTTP": text}).http)
    typeahead = outcome(lambda: TypeaheadSettings.from_env({"PINLATER_TYPEAHEAD_HTTP": text}).http)
    assert feed == typeahead
    assert isinstance(feed, Address) == (text in ("localhost:9000", " [::1]:9000 "))


def test_blank_is_the_default() -> None:
    assert FeedSettings.from_env({"PINLATER_FEED_HTTP": " "}).http == Address("127.0.0.1", 8090)
    assert TypeaheadSettings.from_env({"PINLATER_TYPEAHEAD_HTTP": ""}).http == Address("127.0.0.1", 8091)
    with pytest.raises(SettingError, match=r"^PINLATER_TYPEAHEAD_ORDER: unknown contact source 'likes'"):
        TypeaheadSettings.from_env({"PINLATER_TYPEAHEAD_ORDER": "mutual,likes"})
