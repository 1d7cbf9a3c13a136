"""What every server connection does alike, whichever protocol it speaks.

Both front-ends (`rustka.native.server`, `rustka.kafka.server`) frame with the
linear receiver, budget their output, push back on slow readers and shut down
the same way; the shared steps live here so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from twisted.internet import defer


def start_serving(proto: Any, config: Any) -> None:
    """The start of a connection: limits from the config, no Nagle delay, push-back,
    the idle timer, and the factory's bookkeeping (connection counts, admin views)."""
    proto.MAX_LENGTH = config.max_frame_bytes
    proto.budget.set_limit(config.max_output_bytes_per_connection)
    set_no_delay = getattr(proto.transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        set_no_delay(True)
    proto.transport.registerProducer(proto, True)
    proto.setTimeout(config.idle_timeout_ms / 1000)
    proto.factory.connection_opened(proto)


def close_all(connections: Collection[Any], reactor: Any, timeout: float) -> defer.Deferred[None]:
    """Graceful shutdown: answer what each client already sent, then hang up.

    Every connection stops reading; each one closes as soon as its last pending
    response is written. Whatever is still open after ``timeout`` seconds is
    aborted, so a stuck client cannot hold the shutdown. ``connections`` is the
    factory's live set, read again when the timeout strikes.
    """
    closing = [proto.finish_and_close() for proto in list(connections)]
    if not closing:
        return defer.succeed(None)
    done = defer.gatherResults(closing)

    def abort_stragglers() -> None:
        for proto in list(connections):
            proto.transport.abortConnection()

    timer = reactor.callLater(timeout, abort_stragglers)

    def finished(_: object) -> None:
        if timer.active():
            timer.cancel()

    return done.addBoth(finished)  # type: ignore[return-value]
