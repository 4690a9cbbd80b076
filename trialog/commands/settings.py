"""``trialog settings``: the resolved connection settings (secrets masked) and what each means."""

from __future__ import annotations

from trialog.commands.parts import command, json_line
from trialog.settings import from_args


def add(sub) -> None:
    p = command(sub, "settings", "Print the resolved connection settings (secrets masked) and what each means.")

    p.add_argument("--json", action="store_true", help="one JSON object: name → {value, help} (secrets masked)")

    def show(args) -> int:
        rows = from_args(args).describe()
        if args.json:
            print(json_line({name: {"value": value, "help": help_text} for name, value, help_text in rows}))
            return 0
        for name, value, help_text in rows:
            print(f"{name:20} {value:28} {help_text}")
        return 0

    p.set_defaults(func=show)
