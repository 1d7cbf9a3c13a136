"""Server-side partition assignors of the consumer group protocol (KIP-848).

Kafka 4's coordinator computes the assignment itself with one of its assignors; a
member names the one it wants (``ServerAssignor``) and the group uses the one most of
its members name, else the first configured. rustka serves Kafka's two:

- ``uniform``: every partition of the subscribed topics to a member subscribed to its
  topic, as evenly as the subscriptions allow, keeping partitions where they are
  whenever balance permits (so a rebalance moves few partitions);
- ``range``: per topic, the members subscribed to it (sorted by member id) get
  consecutive ranges of its partitions, the first ``partitions % members`` one more.

Pure functions: no clock, no reactor. docs/kafka.md, "Consumer groups (KIP-848)".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Final

#: topic name -> partitions of it.
Assignment = dict[str, frozenset[int]]

#: (member id -> topics it subscribes to, topic -> partition count, current target) ->
#: the new target of every member.
Assignor = Callable[
    [Mapping[str, Set[str]], Mapping[str, int], Mapping[str, Assignment]],
    dict[str, Assignment],
]


def _pack(owned: Mapping[str, set[tuple[str, int]]]) -> dict[str, Assignment]:
    result: dict[str, Assignment] = {}
    for member, partitions in owned.items():
        by_topic: dict[str, set[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, set()).add(partition)
        result[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def uniform(
    subscriptions: Mapping[str, Set[str]],
    topics: Mapping[str, int],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Kafka's ``uniform`` assignor: balanced and sticky.

    Partitions a member keeps (still subscribed, topic still there) stay with it while
    it holds no more than its fair share; the rest go to the least loaded eligible
    member; then a partition moves from a member holding two or more than another
    eligible member until no such move exists.
    """
    members = sorted(subscriptions)
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    if not members:
        return {}
    every = sorted(
        (t, p)
        for t, count in topics.items()
        if any(t in subscriptions[m] for m in members)
        for p in range(count)
    )
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in every}
    share = -(-len(every) // len(members))  # ceil: nobody keeps more than this
    taken: set[tuple[str, int]] = set()
    for member in members:
        for topic, partitions in sorted(current.get(member, {}).items()):
            if topic not in subscriptions[member] or topic not in topics:
                continue
            for partition in sorted(partitions):
                tp = (topic, partition)
                if partition < topics[topic] and tp not in taken and len(owned[member]) < share:
                    owned[member].add(tp)
                    taken.add(tp)
    for tp in every:
        if tp not in taken:
            target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owned[target].add(tp)
            taken.add(tp)
    moved = True
    while moved:
        moved = False
        for tp in every:
            holder = next(m for m in eligible[tp] if tp in owned[m])
            lightest = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            if len(owned[holder]) - len(owned[lightest]) >= 2:
                owned[holder].discard(tp)
                owned[lightest].add(tp)
                moved = True
    return _pack(owned)


def range_assignor(
    subscriptions: Mapping[str, Set[str]],
    topics: Mapping[str, int],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Kafka's ``range`` assignor: per topic, consecutive ranges to its subscribers.

    Members subscribed to the same topics with the same partition counts get the same
    partition numbers of each (co-partitioning), which is why applications choose it.
    """
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in subscriptions}
    for topic, count in sorted(topics.items()):
        subscribers = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if not subscribers:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for index, member in enumerate(subscribers):
            size = quota + (1 if index < extra else 0)
            owned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return _pack(owned)


#: Kafka's names for the assignors rustka serves.
ASSIGNORS: Final[dict[str, Assignor]] = {"uniform": uniform, "range": range_assignor}
