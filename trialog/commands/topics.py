"""``trialog topics create|describe``: the deployment's topics."""

from __future__ import annotations

import sys

from trialog.commands.parts import command, run_async
from trialog.settings import from_args


def add(sub) -> None:
    topics = sub.add_parser("topics", help="Create or describe the deployment's topics.")
    tsub = topics.add_subparsers(metavar="ACTION")
    create = command(
        tsub,
        "create",
        "Create the topics (idempotent): control and events with equal partitions, trials compacted, events kept.",
    )
    describe = command(
        tsub,
        "describe",
        "Show partitions, replicas (the fewest in sync of any partition) and main configs of each topic.",
    )

    def do_create(args) -> int:
        from trialog.bus import connect

        async def go():
            bus = connect(from_args(args))
            created = await bus.create_topics()
            return created, await bus.describe_topics()

        created, described = run_async(go())
        for name, info in sorted(described.items()):
            state = "created" if name in created else "exists"
            policy = info["configs"].get("cleanup.policy")
            print(
                f"{name:36} {state:8} partitions={info['partitions']} replication={info['replication_factor']} "
                f"cleanup.policy={policy}"
            )
        return 0

    def do_describe(args) -> int:
        from trialog.bus import connect

        described = run_async(connect(from_args(args)).describe_topics())
        if not described:
            print("no Trialog topics here: run `trialog topics create`", file=sys.stderr)
            return 1
        # Fewer copies in sync than kept: a broker is down or catching up, and losing one more
        # may lose writes (or, below min.insync.replicas, refuse them).
        under = sorted(n for n, i in described.items() if i["in_sync_replicas"] < i["replication_factor"])
        for name, info in sorted(described.items()):
            keys = ("cleanup.policy", "retention.ms", "min.insync.replicas", "max.message.bytes")
            configs = " ".join(f"{k}={info['configs'].get(k)}" for k in keys)
            replicas = f"replication={info['replication_factor']} in_sync={info['in_sync_replicas']}"
            flag = " UNDER-REPLICATED" if name in under else ""
            print(f"{name:36} partitions={info['partitions']} {replicas} " + configs + flag)
        if under:
            print(f"under-replicated (a copy out of sync: a broker down or catching up): {', '.join(under)}",
                  file=sys.stderr)  # fmt: skip
        return 0

    create.set_defaults(func=do_create)
    describe.set_defaults(func=do_describe)
