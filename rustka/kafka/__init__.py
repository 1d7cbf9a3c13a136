"""Kafka wire-protocol codec for rustka's Kafka-compatible front-end.

Pure, synchronous and dependency-free on purpose: the front-end (Twisted) and the mirror
client both sit on top of it, and keeping I/O out of here lets every byte be tested in
isolation. `schema` holds the primitive encodings and the machinery that derives encoders
and decoders from declarations; `messages` declares every supported API version once and
exposes the public encode/decode functions; `errors` carries Kafka's error-code numbers.
"""
