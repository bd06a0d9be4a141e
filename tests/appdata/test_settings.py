"""The shard map from PINLATER_APPDATA_* settings (no server needed)."""

from __future__ import annotations

import pytest

from pinlater.kit.envsettings import SettingError
from tasks.appdata.errors import UnknownShard
from tasks.appdata.settings import PREFIX_VAR, SHARDS_VAR, TIMEOUT_VAR, AppDataSettings
from tasks.appdata.shardmap import Server
from tests.support.appdata import ENV


def test_defaults_are_four_shards_on_the_local_test_server() -> None:
    settings = AppDataSettings.from_env({})
    assert settings.shard_map.shards == (0, 1, 2, 3)
    assert settings.shard_map.locate(2).database == "appdata_s00002"
    assert settings.socket_timeout_s == 5.0


def test_the_test_fixtures_spell_the_settings_names_right() -> None:
    settings = AppDataSettings.from_env(ENV)
    assert set(ENV) == {SHARDS_VAR, PREFIX_VAR, TIMEOUT_VAR}
    assert settings.socket_timeout_s == 20.0


def test_ranges_servers_and_databases() -> None:
    settings = AppDataSettings.from_env({
        SHARDS_VAR: "4096-8191=mysql://u:p%40ss@db2:3307, 0-4095=mysql://u:pw@db1,9000=mysql://u:pw@db1",
        PREFIX_VAR: "db",
        TIMEOUT_VAR: "2.5",
    })
    m = settings.shard_map
    assert [(r.first, r.last) for r in m.ranges] == [(0, 4095), (4096, 8191), (9000, 9000)]
    assert m.locate(3429).server == Server("db1", 3306, "u", "pw")
    assert m.locate(3429).database == "dbs03429"
    assert m.locate(5000).server.password == "p@ss" and m.locate(5000).server.port == 3307
    assert m.servers == (Server("db1", 3306, "u", "pw"), Server("db2", 3307, "u", "p@ss"))
    assert len(m.shards) == 8193
    assert settings.socket_timeout_s == 2.5
    for shard in (8192, 8999, 9001, 65535):
        with pytest.raises(UnknownShard, match=str(shard)):
            m.locate(shard)
    assert "p@ss" not in repr(m)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        (SHARDS_VAR, "0-3=mysql://u@h,3-5=mysql://u@h2", "overlap"),
        (SHARDS_VAR, "0-3=redis://h:6379", "not a mysql:// URL"),
        (SHARDS_VAR, "0-3=mysql://u@h/appdata", "names no database"),
        (SHARDS_VAR, "0-3", "must look like"),
        (SHARDS_VAR, "a-b=mysql://u@h", "not a shard range"),
        (SHARDS_VAR, "5-2=mysql://u@h", "first <= last"),
        (SHARDS_VAR, "0-65536=mysql://u@h", "65535"),
        (SHARDS_VAR, "0-3=mysql://u@h:99999", "port"),
        (SHARDS_VAR, " , ", "at least one range"),
        (PREFIX_VAR, "app-data", "A-Za-z0-9_"),
        (TIMEOUT_VAR, "soon", "number"),
        (TIMEOUT_VAR, "0", "above 0"),
    ],
)
def test_bad_settings_name_their_variable(variable: str, value: str, problem: str) -> None:
    with pytest.raises(SettingError) as info:
        AppDataSettings.from_env({variable: value})
    assert info.value.variable == variable
    assert str(info.value).startswith(f"{variable}: ")
    assert problem in str(info.value)
