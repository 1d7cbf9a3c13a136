"""Building many small objects at once without the cyclic collector's help.

Decoding a multi-MiB fetch or queuing thousands of records creates tens of
thousands of tuples in one go. CPython starts a generation-0 collection every
few hundred allocations, and each one walks the young objects again, although
records hold no reference cycles for it to find. Pausing the collector for the
duration of such a burst replaces hundreds of collections with one, afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of acyclic allocations.

    Restores the collector's prior state, so nesting and callers that run with
    the collector disabled are unaffected. Reference counting still frees
    everything as usual; only cycle detection waits.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
