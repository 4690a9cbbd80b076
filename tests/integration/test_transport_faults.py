"""What the Kafka edge does with records that are hard to read or too large to write,
on a real broker: compressed batches of every codec are read; a batch that truly
cannot be read is skipped and dead-lettered once, the records around it delivered;
an oversized record is refused with a clear trial error and poisons nothing; a client
whose background fetcher or sender ended is replaced, and trials go on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import NodeNotReadyError

from tests.harness import deployment
from tests.integration.test_trials import read_trial
from trialog.bus.kafka import KafkaBus
from trialog.bus.kafka_consumer import partitions_of
from trialog.errors import RecordsTooLarge, TopicMissingError, TransportError
from trialog.protocol.events import DeadLetter, Observation, Reward, StartRequest, TrialEnded
from trialog.protocol.topics import CONTROL, DEAD_LETTERS, EVENTS
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
CODECS = ("gzip", "snappy", "lz4", "zstd")


async def dead_letters(bus: KafkaBus) -> list[DeadLetter]:
    consumer = bus.consumer([DEAD_LETTERS])
    await consumer.start()
    try:
        ends = await consumer.end_offsets(consumer.assignment())
        out: list[DeadLetter] = []
        seen = 0
        while seen < sum(ends.values()):
            for r in await consumer.poll(timeout_ms=1000):
                seen += 1
                out.append(DeadLetter(**bus.store.decode(r.value, DeadLetter.SCHEMA)))
        return out
    finally:
        await consumer.stop()


async def produce_batch(bus: KafkaBus, codec: str | None, role: str, items: list[tuple[str, object]]) -> None:
    """Write events as ONE record batch compressed with ``codec``, as a client in another
    language would (aiokafka's own producer, not Trialog's)."""
    producer = AIOKafkaProducer(bootstrap_servers=bus.settings.bootstrap_servers, compression_type=codec, linger_ms=0)
    await producer.start()
    try:
        partitions = {bus.partition_of(tid) for tid, _ in items}
        assert len(partitions) == 1, "one batch is one partition"
        batch = producer.create_batch()
        for _, event in items:
            _, key, value, headers = bus.to_record(role, event)
            assert batch.append(key=key, value=value, timestamp=None, headers=headers) is not None
        batch.close()
        await (await producer.send_batch(batch, bus.settings.topic(role), partition=partitions.pop()))
    finally:
        await producer.stop()


def same_partition_ids(bus: KafkaBus, prefix: str, count: int, partition: int | None = None) -> list[str]:
    """Trial IDs that all land in one partition (to put a bad batch between honest trials)."""
    out, i = [], 0
    while len(out) < count:
        tid = f"{prefix}-{i}"
        if partition is None:
            partition = bus.partition_of(tid)
        if bus.partition_of(tid) == partition:
            out.append(tid)
        i += 1
    return out


async def ended_in_index(ctl, tid: str, timeout: float = 60):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await ctl.trial_record(tid)
        if record is not None and record.status == "ended":
            return record
        assert asyncio.get_running_loop().time() < deadline, f"{tid} did not end: {record}"
        await asyncio.sleep(0.5)


def start(tid: str, **fields) -> StartRequest:
    return StartRequest(
        tid, spec="trialtest", requested_by="test", seed=7, implementations={}, parameters="{}", **fields
    )


@pytest.fixture
def bus(kafka_settings):
    return KafkaBus(kafka_settings)


async def test_compressed_batches_of_every_codec_are_read(bus):
    """Start requests and rewards compressed with each codec reach every service:
    each trial starts, runs and ends as an uncompressed one does."""
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        trials = {codec: f"compressed-{codec}" for codec in CODECS}
        waits = {}
        for codec, tid in trials.items():
            waits[codec] = asyncio.create_task(ctl.wait_ended(tid, timeout=60))  # watching before the request
            await produce_batch(bus, codec, CONTROL, [(tid, start(tid, max_ticks=5))])
        for codec, tid in trials.items():
            ended = await waits[codec]
            assert ended.reason in ("max_ticks", "environment"), (codec, ended)
            await produce_batch(
                bus,
                codec,
                EVENTS,
                [(tid, Reward(tid, tick=1, receiver="alice", value=3.0, confidence=1.0, sender="judge"))],
            )
        await asyncio.sleep(1.0)
        assert all(not t.done() for t in d.tasks), "a service stopped"
    for codec, tid in trials.items():
        events = await read_trial(bus, tid)
        assert any(isinstance(e, Reward) and e.sender == "judge" for e in events), codec
    assert not await dead_letters(bus)


async def test_a_batch_that_cannot_be_read_is_skipped_and_dead_lettered_once(bus, monkeypatch):
    """Snappy batches read by services that lack the codec. On control, between two
    start requests of the same partition: both trials run, the batch's three requests
    are dead-lettered once. On events, before those trials' events in the same
    partition: skipped by every service, dead-lettered once. No service stops."""
    before, *unreadable, after, ghost = same_partition_ids(bus, "around-bad-batch", 6)
    await bus.create_topics()
    reward = Reward(ghost, tick=0, receiver="alice", value=1.0, confidence=1.0, sender="judge")
    await produce_batch(bus, "snappy", EVENTS, [(ghost, reward), (ghost, reward)])
    async with bus:
        await bus.publish(CONTROL, start(before, max_ticks=3))
    await produce_batch(bus, "snappy", CONTROL, [(tid, start(tid, max_ticks=3)) for tid in unreadable])
    async with bus:
        await bus.publish(CONTROL, start(after, max_ticks=3))
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # from here on, this process cannot read snappy
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        for tid in (before, after):  # requested before the controller began watching: ask the index
            assert (await ended_in_index(ctl, tid)).reason == "max_ticks"
        await asyncio.sleep(1.0)
        assert all(not t.done() for t in d.tasks), "a service stopped"
    letters = sorted(await dead_letters(bus), key=lambda x: x.topic)
    assert [(x.topic, x.offset, x.service) for x in letters] == [
        (bus.settings.topic(CONTROL), 1, "orchestrator"),  # between `before` (0) and `after` (4)
        (bus.settings.topic(EVENTS), 0, "orchestrator"),
    ], [x.reason for x in letters]
    assert "offsets 1..3" in letters[0].reason and "offsets 0..1" in letters[1].reason
    assert all("unreadable batch" in x.reason and "UnsupportedCodecError" in x.reason for x in letters)
    for tid in (*unreadable, ghost):
        assert not await read_trial(bus, tid), f"a record of an unreadable batch was applied ({tid})"
    for tid in (before, after):
        assert sum(isinstance(e, TrialEnded) for e in await read_trial(bus, tid)) == 1


async def test_an_oversized_record_ends_its_trial_with_a_clear_error_and_poisons_nothing(bus):
    """An environment writes a message larger than the events topic takes: refused before
    the producer, its trial ends with reason error and the size in the details, one
    note in dead letters; a trial in the same partition finishes as usual."""
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        bloated, honest = same_partition_ids(bus, "size", 2)
        await ctl.start_trial("trialtest", trial_id=bloated, environment="bloated", max_ticks=20)
        await ctl.start_trial("trialtest", trial_id=honest, environment="slow", max_ticks=20)
        ended = await ctl.wait_ended(bloated, timeout=60)
        assert ended.reason == "error"
        assert "exceeds" in ended.details and "limit of topic" in ended.details, ended.details
        assert (await ctl.wait_ended(honest, timeout=60)).reason == "max_ticks"
        with pytest.raises(RecordsTooLarge, match="trial.start of .* bytes .* exceeds"):
            await ctl.start_trial("trialtest", parameters={"huge": "y" * 2_000_000})
    letters = await dead_letters(bus)
    # The oversized record is lettered once. The actors' answers to the observations logged
    # just before the failure may reach the log after the end: lettered as late actions
    # (docs/protocol.md), whether they do depends on the machine's timing.
    oversized = [x for x in letters if x.offset == -1]
    late = [x for x in letters if x.offset != -1]
    assert len(oversized) == 1, [x.reason for x in letters]
    assert oversized[0].key == bloated.encode() and "exceeds" in oversized[0].reason
    assert all(
        x.key == bloated.encode() and x.headers.get("kind") == b"action" and "it has ended" in x.reason for x in late
    ), [x.reason for x in letters]
    assert sum(isinstance(e, TrialEnded) for e in await read_trial(bus, honest)) == 1


async def test_a_record_the_broker_refuses_for_its_size_does_not_poison_the_producer(bus):
    """Should a topic take less than we think (created by someone else), the broker's
    refusal names the record, the producer is replaced, and the next sends to the
    same partition go through (an idempotent producer would otherwise answer them
    with OutOfOrderSequenceNumber)."""
    await bus.create_topics()
    async with bus:
        bus.record_limits[EVENTS] = 4 * 1024 * 1024  # the topic itself takes 1 MB
        tid = "refused-by-broker"
        big = Reward(
            tid,
            tick=1,
            receiver="alice",
            value=1.0,
            confidence=1.0,
            sender="judge",
            user_data='"' + "z" * 1_500_000 + '"',
        )
        small = Reward(tid, tick=2, receiver="alice", value=1.0, confidence=1.0, sender="judge")
        with pytest.raises(RecordsTooLarge) as refused:
            await bus.publish_all(EVENTS, [small, big, small])
        assert list(refused.value.refused) == [1] and sorted(refused.value.delivered) == [0, 2]
        for tick in range(3, 8):
            await bus.publish(
                EVENTS, Reward(tid, tick=tick, receiver="alice", value=1.0, confidence=1.0, sender="judge")
            )
    ticks = [e.tick for e in await read_trial(bus, tid)]
    assert ticks == [2, 2, 3, 4, 5, 6, 7]


def fail_next(client, request: str, error: Exception | None = None) -> list:
    """Make ``client`` fail its next request of type ``request``* the way aiokafka 0.14 does
    when a request timed out on a connection already closed (as while a broker restarts):
    a KeyError out of ``AIOKafkaClient.send``, which ends the background task (fetcher or
    sender) that made the request, with no error for the consumer or producer's user.
    Or with ``error``."""
    original, failed = client.send, []

    async def send(node_id, req, *args, **kwargs):
        if not failed and type(req).__name__.startswith(request):
            failed.append(req)
            raise error or KeyError((node_id, "DEFAULT"))
        return await original(node_id, req, *args, **kwargs)

    client.send = send
    return failed


async def test_a_consumer_whose_fetcher_ended_is_replaced_and_trials_go_on(bus):
    """Mid-trial, the environment's consumer loses its fetcher, then every service's
    producer loses its sender (the bus is shared here). Without replacement the trial would
    stall until inactivity ended it; with it, it ends at max_ticks with every tick once."""
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=60)
        await wait_ticks(ctl, tid, 10)
        (env,) = [loop for loop in d.loops if loop.group == "env.slow"]
        fetcher = env.consumer._consumer._fetcher.error_future
        failed = fail_next(env.consumer._consumer._client, "FetchRequest")
        await asyncio.wait([fetcher], timeout=30)  # the fetcher ended, as in aiokafka's bug
        assert failed and isinstance(fetcher.exception(), Exception)
        await wait_ticks(ctl, tid, ctl.last_tick(tid) + 5)
        sender = bus._producer._sender.sender_task
        failed = fail_next(bus._producer.client, "ProduceRequest")
        await asyncio.wait([sender], timeout=30)
        assert failed and isinstance(sender.exception(), Exception)
        ended = await ctl.wait_ended(tid, timeout=60)
        assert (ended.reason, ended.tick) == ("max_ticks", 60), ended
        assert all(not t.done() for t in d.tasks), "a service stopped"
    seen = [(e.tick, e.actor) for e in await read_trial(bus, tid) if isinstance(e, Observation)]
    assert sorted(seen) == [(t, a) for t in range(61) for a in ("alice", "bob")], seen


async def test_a_consumer_whose_metadata_task_or_coordination_failed_recovers(bus):
    """Mid-trial, the environment's consumer loses its metadata task, then its coordinator
    (its next commit must look the coordinator up, which waits for fresh metadata): without
    a new metadata task the loop would wait in that commit forever and the trial end by
    inactivity (seen in a chaos run after a broker restart). Then a coordinator lookup
    fails inside aiokafka: the consumer is replaced. The trial ends at max_ticks, every tick once."""
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=80)
        await wait_ticks(ctl, tid, 10)
        (env,) = [loop for loop in d.loops if loop.group == "env.slow"]
        client = env.consumer._consumer._client
        sync, refresh = client._sync_task, client._metadata_update

        async def fails_once(*args):
            client._metadata_update = refresh
            raise KeyError((1, "DEFAULT"))

        client._metadata_update = fails_once
        client.force_metadata_update()
        await asyncio.wait([sync], timeout=30)
        assert sync.done() and isinstance(sync.exception(), KeyError)
        # The broker is away for one lookup: aiokafka asks for fresh metadata before the next.
        fail_next(client, "FindCoordinator", NodeNotReadyError("the broker is away (test)"))
        env.consumer._consumer._coordinator.coordinator_dead()
        for _ in range(100):
            if client._sync_task is not sync:
                break
            await asyncio.sleep(0.1)
        assert client._sync_task is not sync and not client._sync_task.done(), "the metadata task was not started again"
        await wait_ticks(ctl, tid, ctl.last_tick(tid) + 10)
        fail_next(env.consumer._consumer._client, "FindCoordinator")
        env.consumer._consumer._coordinator.coordinator_dead()
        ended = await ctl.wait_ended(tid, timeout=60)
        assert (ended.reason, ended.tick) == ("max_ticks", 80), ended
        assert all(not t.done() for t in d.tasks), "a service stopped"
    seen = [(e.tick, e.actor) for e in await read_trial(bus, tid) if isinstance(e, Observation)]
    assert sorted(seen) == [(t, a) for t in range(81) for a in ("alice", "bob")], seen


async def test_a_reader_whose_fetcher_ended_goes_on_from_where_it_was(bus, monkeypatch):
    """A plain reader (as the controller's and the gateway's) replaced after its fetcher
    ended hands out every record once, in order, from where it was; its replacement waits
    for Kafka when it cannot start at once (its fetcher often ends while the broker is away)."""
    await bus.create_topics()
    tid = "fetcher-ends"
    rewards = [Reward(tid, tick=t, receiver="alice", value=1.0, confidence=1.0, sender="judge") for t in range(40)]
    reader = bus.consumer([EVENTS], partitions=[bus.partition_of(tid)])
    async with bus:
        await reader.start()
        try:
            await bus.publish_all(EVENTS, rewards[:20])
            seen = await poll_ticks(bus, reader, 20)
            fetcher = reader._consumer._fetcher.error_future
            fail_next(reader._consumer._client, "FetchRequest")
            start, refusals = reader.start, []

            async def away_twice():
                if len(refusals) < 2:
                    refusals.append(1)
                    raise TransportError("cannot consume from Kafka: the broker is away (test)")
                await start()

            monkeypatch.setattr(reader, "start", away_twice)
            await bus.publish_all(EVENTS, rewards[20:])
            await asyncio.wait([fetcher], timeout=30)
            assert fetcher.done()
            seen += await poll_ticks(bus, reader, 20)
        finally:
            await reader.stop()
    assert seen == list(range(40)) and len(refusals) == 2


async def poll_ticks(bus: KafkaBus, reader, count: int, timeout: float = 60) -> list[int]:
    """The ticks of the next ``count`` events ``reader`` hands out."""
    ticks: list[int] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while len(ticks) < count and asyncio.get_running_loop().time() < deadline:
        ticks += [bus.codec.decode(r.value, r.header("kind")).tick for r in await reader.poll(timeout_ms=200)]
    return ticks


async def wait_ticks(ctl, tid: str, tick: int, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while ctl.last_tick(tid) < tick:
        assert asyncio.get_running_loop().time() < deadline, f"{tid} did not reach tick {tick}"
        await asyncio.sleep(0.05)


async def test_a_reader_asks_the_cluster_about_its_own_topics_only(bus, monkeypatch):
    """Starting a reader costs the same on a cluster of thousands of topics as on an empty one:
    its metadata request names its topics (the whole cluster's metadata, decoded on the event
    loop, stalled a gateway's real-time pages); a missing topic is a clear error, not created."""
    from aiokafka.protocol.metadata import MetadataRequest

    await bus.create_topics()
    await bus.start()
    asked: list = []
    original = MetadataRequest.__init__

    def recording(self, topics=None, *args, **kwargs):
        asked.append(topics)
        original(self, topics, *args, **kwargs)

    monkeypatch.setattr(MetadataRequest, "__init__", recording)
    try:
        reader = bus.consumer([EVENTS])
        await reader.start()
        try:
            assert {p for _, p in reader.assignment()} == set(range(bus.partitions))
        finally:
            await reader.stop()
        assert asked and None not in asked, f"a request for every topic of the cluster: {asked}"
        missing = bus.consumer(["no-such-role"])
        with pytest.raises(TopicMissingError, match="does not exist"):
            await missing.start()
        assert not (await partitions_of(bus._producer.client, [bus.settings.topic("no-such-role")]))[
            bus.settings.topic("no-such-role")
        ]
    finally:
        await bus.stop()
