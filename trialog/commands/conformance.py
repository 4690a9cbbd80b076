"""``trialog conformance``: the command line of the conformance suite (:mod:`trialog.tools.conformance`)."""

from __future__ import annotations

from trialog.commands.parts import command, positive_int, run_async
from trialog.errors import TrialogError
from trialog.settings import from_args


def add(sub) -> None:
    p = command(
        sub,
        "conformance",
        "Check an actor service (any language) against the protocol, on the broker: one line per check.",
    )
    p.add_argument("--implementation", required=True, metavar="NAME", help="the spec's actor implementation under test")
    p.add_argument(
        "--command",
        metavar="CMD",
        help="the command serving NAME (default for a Python implementation: trialog serve actors)",
    )
    p.add_argument(
        "--trials",
        type=positive_int,
        default=3,
        help="trials in all: one with every injection, the others plain and concurrent (default 3)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the first trial")

    def go(args) -> int:
        from trialog.tools.conformance.suite import run_conformance

        spec_file = from_args(args).spec
        if not spec_file:
            raise TrialogError("conformance needs --spec FILE (or TRIALOG_SPEC)")
        return run_async(
            run_conformance(
                from_args(args), spec_file, args.implementation, args.command, trials=args.trials, seed=args.seed
            )
        )

    p.set_defaults(func=go)
