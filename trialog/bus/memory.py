"""An in-process stand-in for Kafka, for unit tests only.

It keeps Kafka's semantics that Trialog relies on — partitions chosen by the key
with Kafka's hash, per-partition order, consumer groups sharing partitions by the
range rule with rebalance callbacks, committed offsets, end offsets — and nothing
else (no retention, no compaction, no durability). Integration tests run the same
scenarios on a real broker.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from trialog.bus.base import (
    AssignmentCallback,
    Bus,
    Consumer,
    Delivered,
    Record,
    partition_for,
)
from trialog.protocol.topics import plan


class MemoryBus(Bus):
    def __init__(self, settings, store=None):
        super().__init__(settings, store)
        self.logs: dict[str, list[list[Record]]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.committed: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
        self.groups: dict[str, list[MemoryConsumer]] = defaultdict(list)
        self.changed = asyncio.Event()
        self._ensure_topics()

    def _ensure_topics(self) -> None:
        for t in plan(self.settings):
            if t.role not in self.logs:
                self.logs[t.role] = [[] for _ in range(t.partitions)]
                self.configs[t.role] = dict(t.configs)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send_many(self, items):
        refused = self.oversized(items)
        delivered = {}
        for i, (role, key, value, headers) in enumerate(items):
            if i in refused:
                continue
            parts = self.logs[role]
            p = partition_for(key, len(parts)) if key else 0
            offset = len(parts[p])
            parts[p].append(Record(role, p, offset, key, value, tuple(headers), int(time.time() * 1000)))
            delivered[i] = Delivered(role, p, offset, parts[p][-1].timestamp_ms)
        self._wake()
        return self.refuse(refused, delivered, items)

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def consumer(
        self, roles, *, group=None, on_assigned=None, on_revoked=None, partitions=None, from_start=True, **_batching
    ):  # no fetches to batch: ``batched`` and ``batch_wait_ms`` change nothing here
        return MemoryConsumer(self, roles, group, on_assigned, on_revoked, partitions, from_start)

    async def create_topics(self, local_instances: int | None = None) -> list[str]:
        self._ensure_topics()
        return []

    async def describe_topics(self) -> dict[str, dict]:
        return {
            self.settings.topic(r): {"partitions": len(p), "configs": self.configs[r]} for r, p in self.logs.items()
        }

    async def delete_topics(self) -> list[str]:
        deleted = [self.settings.topic(r) for r in self.logs]
        self.logs.clear()
        self.configs.clear()
        return deleted

    def records(self, role: str) -> list[Record]:
        """Every record of a role, partition by partition (for assertions)."""
        return [r for part in self.logs[role] for r in part]


class MemoryConsumer(Consumer):
    def __init__(self, bus: MemoryBus, roles: Sequence[str], group, on_assigned, on_revoked, partitions, from_start):
        self.bus = bus
        self.roles = list(roles)
        self.group = group
        self.on_assigned: AssignmentCallback | None = on_assigned
        self.on_revoked: AssignmentCallback | None = on_revoked
        self.partitions = partitions
        self.from_start = from_start
        self.positions: dict[tuple[str, int], int] = {}
        self._assigned: set[tuple[str, int]] = set()
        self._generation_seen = -1

    async def start(self) -> None:
        if self.group:
            self.bus.groups[self.group].append(self)
            self.bus._wake()
        else:
            for role in self.roles:
                parts = range(len(self.bus.logs[role])) if self.partitions is None else self.partitions
                for p in parts:
                    self.positions[(role, p)] = 0 if self.from_start else len(self.bus.logs[role][p])
            self._assigned = set(self.positions)

    async def stop(self) -> None:
        if self.group and self in self.bus.groups[self.group]:
            self.bus.groups[self.group].remove(self)
            self.bus._wake()

    def _target_assignment(self) -> set[tuple[str, int]]:
        members = self.bus.groups[self.group]
        index = members.index(self)
        mine: set[tuple[str, int]] = set()
        for role in self.roles:
            n = len(self.bus.logs[role])
            per, extra = divmod(n, len(members))
            start = index * per + min(index, extra)
            count = per + (1 if index < extra else 0)
            mine.update((role, p) for p in range(start, start + count))
        return mine

    async def _rebalance(self) -> None:
        target = self._target_assignment()
        if target == self._assigned:
            return
        revoked = self._assigned
        if revoked and self.on_revoked:
            await self.on_revoked(set(revoked))
        for rp in revoked:
            self.positions.pop(rp, None)
        self._assigned = target
        for rp in target:
            committed = self.bus.committed[self.group].get(rp)
            self.positions[rp] = (
                committed[0] if committed else (0 if self.from_start else len(self.bus.logs[rp[0]][rp[1]]))
            )
        if target and self.on_assigned:
            await self.on_assigned(set(target))

    async def poll(self, timeout_ms: int = 100, max_records: int | None = None) -> list[Record]:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self.group:
                await self._rebalance()
            out: list[Record] = []
            for rp, pos in sorted(self.positions.items()):
                log = self.bus.logs[rp[0]][rp[1]]
                if pos < len(log):
                    take = log[pos:] if max_records is None else log[pos : pos + max_records - len(out)]
                    out.extend(take)
                    self.positions[rp] = pos + len(take)
                if max_records is not None and len(out) >= max_records:
                    break
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(remaining):
                    await self.bus.changed.wait()
            except TimeoutError:
                return []

    def seek(self, role: str, partition: int, offset: int) -> None:
        self.positions[(role, partition)] = offset

    def hold(self) -> bool:
        return True  # nothing is fetched ahead: what the loop writes is read only by its polls

    def skip_written(self, role: str, partition: int, first: int, after: int) -> bool:
        if self.positions.get((role, partition)) != first:
            return False
        self.positions[(role, partition)] = after
        return True

    def position_hint(self, role: str, partition: int) -> int | None:
        return self.positions.get((role, partition))

    async def committed(self, role: str, partition: int) -> tuple[int | None, str]:
        return self.bus.committed[self.group].get((role, partition), (None, "")) if self.group else (None, "")

    async def commit(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        if self.group:
            self.bus.committed[self.group].update({rp: o for rp, o in offsets.items() if rp in self._assigned})

    async def end_offsets(self, parts: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {(r, p): len(self.bus.logs[r][p]) for r, p in parts}

    def assignment(self) -> set[tuple[str, int]]:
        return set(self._assigned)
