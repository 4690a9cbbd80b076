"""``trialog dead-letters``: list the records services could not use, with their reasons,
and explain each kind of reason (:mod:`trialog.datalog.deadletters`)."""

from __future__ import annotations

from collections import Counter

import orjson

from trialog.commands.parts import command, run_async
from trialog.datalog.deadletters import explain, read_letters
from trialog.errors import TopicMissingError
from trialog.settings import from_args


def add(sub) -> None:
    """``trialog dead-letters [--json] [--trial TRIAL_ID] [--limit N]``."""
    p = command(
        sub,
        "dead-letters",
        "List the records services could not use, with their reasons, and explain each kind of reason.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per letter (value as base64)")
    p.add_argument("--trial", metavar="TRIAL_ID", help="only letters of this trial")
    p.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="list the last N letters (default %(default)s; 0: all); the summary counts all",
    )
    p.set_defaults(func=_command)


def _command(args) -> int:
    from trialog.bus import connect

    async def go():
        async with connect(from_args(args)) as bus:
            try:
                return await read_letters(bus)
            except TopicMissingError:
                return []

    letters = [item for item in run_async(go()) if not args.trial or item["trial_id"] == args.trial]
    if args.json:
        for item in letters:
            print(orjson.dumps(item).decode())
        return 0
    if not letters:
        print("no dead letters")
        return 0
    shown = letters[-args.limit :] if args.limit else letters
    for item in shown:
        print(
            f"{item.get('time') or '-':32} {item['service']:12} {item.get('kind') or '-':18} "
            f"{item['trial_id'][:24]:24} {item['reason']}"
        )
    counts = Counter(item["category"] for item in letters)
    example = {item["category"]: item["reason"] for item in letters}
    last_shown = f", the last {len(shown)} shown" if len(shown) < len(letters) else ""
    print(f"\n{len(letters)} dead letter(s){last_shown}; by reason:")
    for category, n in counts.most_common():
        print(f"  {n:>5}  {category}\n         {explain(example[category])}")
    return 0
