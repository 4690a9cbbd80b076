"""``trialog run``: a campaign of trials from a spec file (:mod:`trialog.tools.campaign`)."""

from __future__ import annotations

from trialog.commands.parts import add_trial_overrides, command, positive_int
from trialog.settings import from_args


def add(sub) -> None:
    p = command(sub, "run", "Run a campaign of trials from a spec file, with progress and a summary.")
    p.add_argument("spec_file", metavar="SPEC", help="the spec file")
    p.add_argument("--trials", type=positive_int, default=10, metavar="N", help="how many trials (default 10)")
    p.add_argument(
        "--concurrency", type=positive_int, default=4, metavar="N", help="trials running at once (default 4)"
    )
    p.add_argument(
        "--serve", action="store_true", help="also run the services for this spec locally for the campaign's duration"
    )
    p.add_argument(
        "--environment-processes", type=positive_int, default=1, metavar="N",
        help="with --serve: environment service processes",
    )  # fmt: skip
    p.add_argument(
        "--actor-processes", type=positive_int, default=1, metavar="N", help="with --serve: actor service processes"
    )
    p.add_argument(
        "--plot", default="trialog-plots/returns.png", metavar="FILE.png",
        help="where the returns plot goes, data beside it (default: %(default)s; '': none)",
    )  # fmt: skip
    add_trial_overrides(
        p,
        seed_help="trial i of the campaign gets seed N+i "
        "(default: each trial's seed is the spec's, else derived from its trial ID)",
    )

    def do_run(args) -> int:
        from trialog.tools.campaign import run_from_cli

        return run_from_cli(args, from_args(args))

    p.set_defaults(func=do_run)
