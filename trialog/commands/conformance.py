"""``trialog conformance``: the command line of the conformance suite (:mod:`trialog.tools.conformance`)."""

from __future__ import annotations

from trialog.commands.parts import command, positive_int, run_async
from trialog.errors import TrialogError
from trialog.settings import from_args


def add(sub) -> None:
    p = command(
        sub,
        "conformance",
        "Check an actor or environment service (any language) against the protocol, on the broker: one line per check.",
    )
    under_test = p.add_mutually_exclusive_group(required=True)
    under_test.add_argument("--implementation", metavar="NAME", help="the spec's actor implementation under test")
    under_test.add_argument("--environment", metavar="NAME", help="the spec's environment implementation under test")
    p.add_argument(
        "--same-as",
        metavar="NAME",
        help="with --environment: an environment of the spec (with an entry) whose observations and rewards "
        "the one under test must equal",
    )
    p.add_argument(
        "--command",
        metavar="CMD",
        help="the command serving NAME (default for a Python implementation: trialog serve actors, "
        "or trialog serve environment)",
    )
    p.add_argument(
        "--trials",
        type=positive_int,
        default=3,
        help="trials in all: one with every injection, the others plain and concurrent (default 3; "
        "an environment always gets 3)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the first trial")

    def go(args) -> int:
        from trialog.tools.conformance.suite import run_conformance

        spec_file = from_args(args).spec
        if not spec_file:
            raise TrialogError("conformance needs --spec FILE (or TRIALOG_SPEC)")
        if args.environment:
            from trialog.tools.conformance.environment import run_environment_conformance

            return run_async(
                run_environment_conformance(
                    from_args(args), spec_file, args.environment, args.command, same_as=args.same_as, seed=args.seed
                )
            )
        if args.same_as:
            raise TrialogError("--same-as goes with --environment")
        return run_async(
            run_conformance(
                from_args(args), spec_file, args.implementation, args.command, trials=args.trials, seed=args.seed
            )
        )

    p.set_defaults(func=go)
