"""The registry every Kafka API declaration goes through: api keys, `APIS`, `api`.

An API is declared once, in its family's module, by an `api(...)` call right after its
request and response structs: key, name, accepted versions, flexible-from, and the
advertised minimum live on that one call, and `APIS` is filled by those calls only.
`ApiKey` names the keys so handlers and guards can refer to them; rustka/kafka/messages/
__init__.py checks that every key has exactly one declaration.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Final

from rustka.kafka.schema import ApiSpec, Field, Struct

F = Field
INT32_MIN: Final = -(2**31)

#: Every declared API by key, in declaration order; filled by `api` only.
APIS: Final[dict[int, ApiSpec]] = {}


class ApiKey(IntEnum):
    """Kafka api keys of the declared APIs."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    SASL_HANDSHAKE = 17
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72


def msg(name: str, *fields: Field) -> Struct:
    """A request or response struct, named as in Kafka's JSON schemas."""
    return Struct(fields, name)


def api(
    key: ApiKey,
    name: str,
    versions: tuple[int, int],
    flexible_from: int | None,
    request: Struct,
    response: Struct,
    *,
    response_header_v0_always: bool = False,
) -> ApiSpec:
    """Declare one API and register it in `APIS`.

    A key declared twice, or a name that is not its key's (``ListOffsets`` for
    ``ApiKey.LIST_OFFSETS``), is refused, so `ApiKey` and `APIS` cannot drift apart.
    """
    if re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper() != key.name:
        raise ValueError(f"api {name!r} is declared under ApiKey.{key.name}")
    if int(key) in APIS:
        raise ValueError(f"api key {int(key)} ({name}) is declared twice")
    spec = ApiSpec(
        key=int(key),
        name=name,
        min_version=versions[0],
        max_version=versions[1],
        flexible_from=flexible_from,
        request=request,
        response=response,
        response_header_v0_always=response_header_v0_always,
    )
    APIS[spec.key] = spec
    return spec
