"""The import path apps use for the consumer (README): ``rustka.consumer``."""

from rustka.client.consumer import Consumer

__all__ = ["Consumer"]
