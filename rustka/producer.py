"""The import path apps use for the batching producer (README): ``rustka.producer``."""

from rustka.client.producer import BatchingProducer

__all__ = ["BatchingProducer"]
