"""What record authentication costs per record: tag (writer) and check (reader), in µs,
beside the same record's Avro encode and decode measured in the same run.

    python tools/trust_cost.py [--records N] [--repeat R]

Prints a Markdown table (docs/security.md quotes one run). Best of R runs of N records
each, so that a busy machine's interruptions are left out.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from trialog.protocol.event_codec import EventCodec
from trialog.protocol.events import Action, ActorSpec, Observation, Reward, TrialStarted
from trialog.trust.authenticator import Authenticator
from trialog.trust.keys import Keyring

TRIAL = "trial-cost"


def best_us(fn: Callable[[], object], records: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(records):
            fn()
        runs.append((time.perf_counter() - start) / records * 1e6)
    return min(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    trust = Authenticator(Keyring.generate())
    trust.learn(TrialStarted(TRIAL, spec="s", environment="e", environment_entry="", environment_config="{}",
                             actors=(ActorSpec("alice", "player", "random"), ActorSpec("bob", "player", "scripted")),
                             actor_classes=(), seed=1))  # fmt: skip
    codec = EventCodec()
    samples = [
        ("observation (64 B payload)", Observation(TRIAL, tick=3, actor="alice", payload=b"x" * 64)),
        ("observation (4 KB payload)", Observation(TRIAL, tick=3, actor="alice", payload=b"x" * 4096)),
        ("action", Action(TRIAL, tick=3, actor="alice", payload=b"\x02")),
        ("reward from env to *", Reward(TRIAL, tick=3, receiver="*", value=1.0, sender="env")),
    ]
    print("| record | value bytes | tags | tag µs | check µs | encode µs | decode µs |")
    print("|---|---|---|---|---|---|---|")
    for name, event in samples:
        value, headers = codec.encode(event), event.headers()
        tags = trust.tag(TRIAL, headers, value)
        tagged = headers + tags
        assert trust.check(TRIAL.encode(), tagged, value) is None
        row = [
            best_us(lambda: trust.tag(TRIAL, headers, value), args.records, args.repeat),  # noqa: B023
            best_us(lambda: trust.check(TRIAL.encode(), tagged, value), args.records, args.repeat),  # noqa: B023
            best_us(lambda: codec.encode(event), args.records, args.repeat),  # noqa: B023
            best_us(lambda: codec.decode(value, event.KIND), args.records, args.repeat),  # noqa: B023
        ]
        print(f"| {name} | {len(value)} | {len(tags)} | " + " | ".join(f"{x:.1f}" for x in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
