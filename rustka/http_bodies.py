"""HTTP request bodies bounded before they are buffered, for the broker's web listeners
(the console, docs/console.md; the schema registry, docs/schema-registry.md).

Twisted Web buffers a whole body (in memory, then a temp file) before the resource sees
it, so a size check in the resource comes too late: a request announcing or sending more
than its listener's bound is hung up on as it arrives.
"""

from __future__ import annotations

from twisted.web import server


def bounded_request(max_body: int, name: str) -> type[server.Request]:
    """A `Request` class that hangs up once a body passes ``max_body`` bytes."""

    class BoundedRequest(server.Request):
        body_bytes = 0

        def gotLength(self, length: int | None) -> None:
            if length is not None and length > max_body:
                self.body_bytes = length
                self.channel.transport.loseConnection()  # type: ignore[union-attr]
                length = 0
            super().gotLength(length)

        def handleContentChunk(self, data: bytes) -> None:
            self.body_bytes += len(data)
            if self.body_bytes > max_body:
                if self.channel is not None:
                    self.channel.transport.loseConnection()  # type: ignore[union-attr]
                return
            super().handleContentChunk(data)

    BoundedRequest.__name__ = BoundedRequest.__qualname__ = name
    return BoundedRequest
