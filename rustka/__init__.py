"""rustka: a small Kafka-style event streaming broker on Twisted.

A request flows server -> broker -> topic -> partition log -> segment; each hop
is one module of this package, named after the part of the log it owns.
"""

__version__ = "0.1.0"
