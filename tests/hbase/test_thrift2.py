"""The Thrift2 client: our IDL against HBase's."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import thriftpy2

from tasks.hbase.idl import THRIFT2
from tests.servers import REPO, ensure_services

JAR = "hbase/m2/org/apache/hbase/hbase-thrift/2.6.1/hbase-thrift-2.6.1.jar"


def spec(value: Any) -> Any:
    """A thrift_spec with the struct classes it names replaced by their names."""
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, tuple | list):
        return tuple(spec(v) for v in value)
    if isinstance(value, dict):
        return {k: spec(v) for k, v in value.items()}
    return value


def test_our_idl_has_hbase_2_6_1_field_ids_and_types(tmp_path: Path) -> None:
    ensure_services()  # resolves the jars
    jar = Path(os.environ.get("PINLATER_CACHE", REPO / ".cache")) / JAR
    with zipfile.ZipFile(jar) as archive:
        (tmp_path / "hbase.thrift").write_bytes(archive.read("org/apache/hadoop/hbase/thrift2/hbase.thrift"))
    real = thriftpy2.load(str(tmp_path / "hbase.thrift"), module_name="apache_hbase_thrift2_thrift")
    for name, ours in vars(THRIFT2).items():
        if hasattr(ours, "thrift_spec"):  # structs and exceptions: each field as HBase's, some left out
            theirs = spec(getattr(real, name).thrift_spec)
            assert {k: theirs.get(k) for k in ours.thrift_spec} == spec(ours.thrift_spec), name
        elif hasattr(ours, "_NAMES_TO_VALUES"):  # enums: whole
            assert ours._NAMES_TO_VALUES == getattr(real, name)._NAMES_TO_VALUES, name
    for method in THRIFT2.THBaseService.thrift_services:
        for part in ("_args", "_result"):
            ours, theirs = (getattr(m.THBaseService, method + part).thrift_spec for m in (THRIFT2, real))
            assert spec(ours) == spec(theirs), method + part
