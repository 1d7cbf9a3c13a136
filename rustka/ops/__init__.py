"""Running the broker: the service tree and tap, listeners, CLI, manhole, metrics, logs."""
