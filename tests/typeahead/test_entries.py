"""decode_contact: reads back every contact cell the writer makes, and
refuses anything else with CorruptCell (a lookup then fails over); a
lookup's contacts are decoded once and shared."""

from __future__ import annotations

import pytest

from tasks.typeahead.entries import CorruptCell, Entry, decode_contact, row_prefix, tall_row_key, token_qualifier
from tasks.typeahead.index import contact_of
from tasks.typeahead.rank import Contact
from tasks.typeahead.sources import FOLLOWERS


@pytest.mark.parametrize(("name", "user_id"),
                         [("John Smith", 5), ("王小明", None), ('quote " and \\ slash', 0), ("", None)])
def test_a_written_contact_reads_back(name: str, user_id: int | None) -> None:
    entry = Entry(owner=1 << 36, source=FOLLOWERS, key="u:5", name=name, user_id=user_id, version=1)
    assert decode_contact(entry.value()) == (name, user_id)


@pytest.mark.parametrize("junk", [
    b"", b"{", b"null", b"[]", b'{"n":"a"}', b'{"u":1}', b'{"n":1,"u":null}', b'{"n":"a","u":"7"}',
    b'{"n":"a","u":null} trailing', b'{"n":"a","u":null}{}', b" " + b'{"n":"a","u":null}', b"\xff\xfe",
])
def test_anything_else_is_a_corrupt_cell(junk: bytes) -> None:
    with pytest.raises(CorruptCell):
        decode_contact(junk)


def test_a_lookups_contact_is_decoded_once_and_shared() -> None:
    entry = Entry(owner=1 << 36, source=FOLLOWERS, key="u:5", name="John Smith", user_id=5, version=1)
    first = contact_of(b"u:5", entry.value())
    assert first == Contact("u:5", "John Smith", 5)
    assert contact_of(b"u:5", entry.value()) is first
    assert contact_of(b"e:john@example.com", entry.value()) == Contact("e:john@example.com", "John Smith", 5)


def test_a_corrupt_cell_raises_each_time_a_lookup_reads_it() -> None:
    """Nothing is cached for it: the lookup after fails over again."""
    for _ in range(2):
        with pytest.raises(CorruptCell):
            contact_of(b"u:5", b'{"n":"a"}')


def test_a_tall_rows_contact_key_is_read_from_its_row() -> None:
    prefix = row_prefix(1 << 36, FOLLOWERS)
    assert tall_row_key(prefix + token_qualifier("john", "u:5")) == b"u:5"
    for junk in (prefix + b"john", prefix + b"john\x00", b"short"):
        with pytest.raises(CorruptCell):
            tall_row_key(junk)
