"""Argument checks and settings of tasks.hbase (no server involved)."""

from __future__ import annotations

import pytest

from pinlater.kit.envsettings import SettingError
from tasks.hbase import (
    ClusterPool,
    HBaseSettings,
    VersionDelete,
    VersionPut,
    delete_cells,
    delete_versions,
    get_versions,
    put_cells,
    put_versions,
)
from tasks.hbase.reads import after_filter, page_filter
from tasks.hbase.settings import Address
from tasks.hbase.writes import _rows_in_calls

NOWHERE = Address("127.0.0.1", 1)
POOL = ClusterPool("unused", NOWHERE, thrift2_address=NOWHERE)  # never reached: the checks fail first


@pytest.mark.parametrize("timestamp", [0, -1, 2**63, 1.5, True])
def test_cell_timestamps_are_positive_ints(timestamp: object) -> None:
    with pytest.raises(ValueError, match="cell timestamp"):
        put_cells(POOL, "t", {b"r": {b"f:q": b""}}, timestamp=timestamp)  # type: ignore[arg-type]


@pytest.mark.parametrize("column", [b"noqualifier", b":q", "f:q"])
def test_columns_are_family_qualifier_bytes(column: object) -> None:
    with pytest.raises(ValueError, match="family:qualifier"):
        put_cells(POOL, "t", {b"r": {column: b""}}, timestamp=1)  # type: ignore[dict-item]


def test_whole_row_deletes_are_refused() -> None:
    with pytest.raises(ValueError, match="whole-row deletes"):
        delete_cells(POOL, "t", {b"r": []}, timestamp=1)


def test_empty_writes_touch_nothing() -> None:
    assert put_cells(POOL, "t", {b"r": {}}, timestamp=1) == 0
    assert put_versions(POOL, "t", []) == 0
    assert delete_versions(POOL, "t", []) == 0
    assert get_versions(POOL, "t", []) == {}


@pytest.mark.parametrize(
    ("cell", "says"),
    [
        (VersionPut(b"r", b"f:q", b"", 0), "cell timestamp"),
        (VersionPut(b"r", b"f:q", b"", 2**63), "cell timestamp"),
        (VersionPut(b"r", b"f:q", b"", True), "cell timestamp"),  # equal to 1 as a key of the cell cache
        (VersionPut(b"r", b"fq", b"", 1), "family:qualifier"),
        (VersionPut(b"r", b"f:q", "text", 1), "cell value must be bytes"),  # type: ignore[arg-type]
        (VersionPut(b"", b"f:q", b"", 1), "row key"),
        (VersionPut("r", b"f:q", b"", 1), "row key"),  # type: ignore[arg-type]
    ],
)
def test_put_versions_checks_every_cell(cell: VersionPut, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        put_versions(POOL, "t", [VersionPut(b"ok", b"f:q", b"", 1), cell])


@pytest.mark.parametrize(
    ("delete", "says"),
    [
        (VersionDelete(b"r", b"f:q", 1, "all"), "delete kind must be one of version, upto, family_version"),  # type: ignore[arg-type]
        (VersionDelete(b"r", b"f:q", 0, "upto"), "cell timestamp"),
        (VersionDelete(b"r", b"f", 1, "version"), "family:qualifier"),
        (VersionDelete(b"r", b"f:q", 1, "family_version"), "family must be bytes b'family' or b'family:'"),
        (VersionDelete(b"r", b":", 1, "family_version"), "family must be"),
        (VersionDelete(b"", b"f:q", 1, "version"), "row key"),
    ],
)
def test_delete_versions_checks_every_marker(delete: VersionDelete, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        delete_versions(POOL, "t", [delete])


def test_get_versions_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="b'family' or b'family:qualifier'"):
        get_versions(POOL, "t", [b"r"], columns=[b":q"])
    with pytest.raises(ValueError, match="max_versions"):
        get_versions(POOL, "t", [b"r"], max_versions=0)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        get_versions(POOL, "t", [b"r"], batch_size=0)
    with pytest.raises(ValueError, match="b'family' or b'family:qualifier'"):
        get_versions(POOL, "t", [b"r"], columns={b"r": [b"m:a", b""]})


def test_calls_hold_whole_rows_in_key_order() -> None:
    cells = {b"c": 2, b"a": 1, b"b": 3, b"d": 1}
    assert _rows_in_calls(cells, 3) == [[b"a", b"b"], [b"c", b"d"]]
    assert _rows_in_calls(cells, 1) == [[b"a"], [b"b"], [b"c"], [b"d"]]
    with pytest.raises(ValueError, match="batch_size"):
        _rows_in_calls(cells, 0)


def test_page_filters() -> None:
    assert page_filter(10, 20) == b"ColumnPaginationFilter(10, 20)"
    assert after_filter(b"it's") == b"ColumnRangeFilter('it''s', false, '', false)"
    for limit, offset in ((0, 0), (100_001, 0), (1, -1)):
        with pytest.raises(ValueError, match=r"^(limit|offset) must be"):
            page_filter(limit, offset)


def test_settings_from_env() -> None:
    settings = HBaseSettings.from_env(
        {
            "PINLATER_HBASE_PRIMARY": "10.0.0.1:9090",
            "PINLATER_HBASE_STANDBY": "10.0.0.2:9091",
            "PINLATER_HBASE_TABLE_PREFIX": "demo",
            "PINLATER_HBASE_CALL_TIMEOUT_S": "0.5",
        }
    )
    assert (str(settings.primary), str(settings.standby)) == ("10.0.0.1:9090", "10.0.0.2:9091")
    assert settings.table_prefix == "demo" and settings.call_timeout_s == 0.5
    defaults = HBaseSettings.from_env({})
    assert [str(a) for a in (defaults.primary, defaults.standby, defaults.primary_thrift2, defaults.standby_thrift2)] \
        == ["127.0.0.1:19090", "127.0.0.1:19091", "127.0.0.1:19092", "127.0.0.1:19093"]
    thrift2 = HBaseSettings.from_env(
        {"PINLATER_HBASE_PRIMARY_THRIFT2": "10.0.0.1:9092", "PINLATER_HBASE_STANDBY_THRIFT2": "10.0.0.2:9093"}
    )
    assert (str(thrift2.primary_thrift2), str(thrift2.standby_thrift2)) == ("10.0.0.1:9092", "10.0.0.2:9093")
    for name in ("PINLATER_HBASE_PRIMARY_THRIFT2", "PINLATER_HBASE_STANDBY_THRIFT2"):
        with pytest.raises(SettingError, match=f"^{name}: must look like HOST:PORT with a port from 1 to 65535, "
                                               "got '127.0.0.1:0'$"):
            HBaseSettings.from_env({name: "127.0.0.1:0"})
    with pytest.raises(SettingError, match="PINLATER_HBASE_STANDBY: must look like HOST:PORT"):
        HBaseSettings.from_env({"PINLATER_HBASE_STANDBY": "nohost"})
    with pytest.raises(SettingError, match="PINLATER_HBASE_POOL_SIZE: must be between 1 and"):
        HBaseSettings.from_env({"PINLATER_HBASE_POOL_SIZE": "0"})
