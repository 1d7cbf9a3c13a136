"""The protocol-neutral broker core that every wire front-end calls.

It schedules storage work onto the I/O pool and per-partition lanes, keeps the
long-poll waiters, topic admin, committed offsets and groups, and counts what it
does. Front-ends (``rustka.native``, ``rustka.kafka``) translate bytes to calls on it.
"""
