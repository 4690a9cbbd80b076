"""``trialog run``: a campaign of trials from a spec file (:mod:`trialog.tools.campaign`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from trialog.commands.parts import add_trial_overrides, command, positive_int, run_async, trial_overrides
from trialog.settings import Settings, from_args


def add(sub) -> None:
    p = command(sub, "run", "Run a campaign of trials from a spec file, with progress and a summary.")
    p.add_argument(
        "spec_file", metavar="SPEC", help="the spec file, or a shipped example's name (rps, overcooked, cartpole)"
    )
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
        from trialog.tools.demo import example_spec

        args.spec_file = example_spec(args.spec_file)
        return run_from_args(args, from_args(args))

    p.set_defaults(func=do_run)


def run_from_args(
    args: Any, settings: Settings, pairings: list[dict[str, str]] | None = None, archive_dir: str | None = None
) -> int:
    from trialog.bus import connect
    from trialog.spec import load_spec
    from trialog.tools.campaign import (
        campaign,
        campaign_overrides,
        create_topics,
        local_services,
        plot_campaign,
        summary_table,
        wait_archived,
        wait_indexed,
    )

    spec = load_spec(args.spec_file)
    overrides_for = campaign_overrides(trial_overrides(args), pairings)

    local = max(args.environment_processes, args.actor_processes) if args.serve else None
    run_async(create_topics(settings, local))
    if args.serve:
        print(
            f"starting services for {spec.name} "
            f"({args.environment_processes} environment, {args.actor_processes} actor process(es))…",
            file=sys.stderr,
        )
        with local_services(
            settings, str(Path(args.spec_file).resolve()), environment_processes=args.environment_processes,
            actor_processes=args.actor_processes, archive_dir=archive_dir,
        ):  # fmt: skip
            result, returns = run_async(campaign(settings, spec, args.trials, args.concurrency, overrides_for))
            run_async(wait_indexed(connect(settings), [o.trial_id for o in result.outcomes if o.trial_id and o.reason]))
            if archive_dir:
                wait_archived(archive_dir, [o.trial_id for o in result.outcomes if o.trial_id and not o.error])
    else:
        result, returns = run_async(campaign(settings, spec, args.trials, args.concurrency, overrides_for))
    print(summary_table(spec, result, returns))
    if args.plot:
        print(f"plot: {plot_campaign(spec, result, returns, args.plot).png}")
    return 1 if any(o.failed for o in result.outcomes) else 0
