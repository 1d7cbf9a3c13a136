"""The Twisted client library: a connection whose calls return Deferreds, a batching
producer and a prefetching consumer.

``from rustka.client import connect`` is the documented entry point for apps.
"""

from rustka.client.protocol import (
    DEFAULT_PORT,
    BrokerError,
    ConnectionClosed,
    FetchResult,
    GroupOffset,
    RustkaClientProtocol,
    TopicMetadata,
    Welcome,
    connect,
)

__all__ = [
    "DEFAULT_PORT",
    "BrokerError",
    "ConnectionClosed",
    "FetchResult",
    "GroupOffset",
    "RustkaClientProtocol",
    "TopicMetadata",
    "Welcome",
    "connect",
]
