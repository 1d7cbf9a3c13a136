"""rustka's native wire protocol (docs/protocol.md): its codec and its server protocol."""
