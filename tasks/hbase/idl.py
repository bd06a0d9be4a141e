"""HBase's two Thrift interfaces, as thriftpy2 modules.

``THRIFT1`` is the one happybase speaks (it loads HBase's IDL at import time
as the module ``Hbase_thrift``, as of happybase 1.3, guarded by
``tests/unit/test_third_party_guards.py``): reads. ``THRIFT2`` is our subset of
the Thrift2 interface (``thrift2.thrift`` beside this file): writes with a
timestamp per cell, versioned reads, and table creation and alters.
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any

import happybase  # noqa: F401  (imported for the Thrift1 IDL it loads)
import thriftpy2

THRIFT1: Any = sys.modules["Hbase_thrift"]
# The module name must end in "_thrift" for its structs to pickle.
THRIFT2: Any = thriftpy2.load(
    str(resources.files("tasks.hbase").joinpath("thrift2.thrift")), module_name="hbase_thrift2_thrift"
)
