"""Sources are five constants: names, codes (part of row keys, forever),
and identity that survives copies and pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

from tasks.typeahead.sources import BY_CODE, SOURCES, UnknownSource, parse_order, source_named


def test_codes_and_names_are_unique() -> None:
    assert len({s.code for s in SOURCES}) == len({s.name for s in SOURCES}) == len(SOURCES)
    assert all(BY_CODE[s.code] is s for s in SOURCES)


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.name)
def test_a_copied_or_unpickled_source_is_the_constant_so_places_holding_it_stay_equal(source: object) -> None:
    place = (7, source, "u:9")
    for again in (pickle.loads(pickle.dumps(place)), copy.deepcopy(place), copy.copy(place)):
        assert again[1] is source
        assert again == place and hash(again) == hash(place)
        assert {place: 1}[again] == 1


def test_unknown_names_and_repeated_order_entries_are_refused_in_one_line() -> None:
    with pytest.raises(UnknownSource, match="unknown contact source 'gmail'"):
        source_named("gmail")
    with pytest.raises(UnknownSource, match="listed twice"):
        parse_order("mutual,following,mutual")
