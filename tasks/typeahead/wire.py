"""The Contacts Service's wire (``contacts.thrift``) as thriftpy2 loads
it: what its server (``tasks.typeahead.service``) and its clients
(``tasks.typeahead.updates``) share."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import thriftpy2

IDL_PATH = Path(__file__).with_name("contacts.thrift")
# The module name must end in "_thrift" for its structs to pickle.
idl: Any = thriftpy2.load(str(IDL_PATH), module_name="contacts_service_thrift")
STRUCTS: dict[str, tuple[Any, Any]] = {
    name: (getattr(idl.ContactsService, f"{name}_args"), getattr(idl.ContactsService, f"{name}_result"))
    for name in idl.ContactsService.thrift_services
}


class ErrorCode(enum.IntEnum):
    """The IDL's ContactsErrorCode."""

    INVALID_REQUEST = 1
    UNAVAILABLE = 2
    PERMISSION_DENIED = 3
    TOO_LARGE = 4
    INTERNAL = 5
