"""``trialog teaming``: AI-only, human-only and human+AI teams in one environment, compared
(:mod:`trialog.tools.teaming`; people or scripted stand-ins join through the gateway)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from trialog.commands.parts import command, positive_int, require_extra, run_async
from trialog.settings import Settings, from_args


def add(sub) -> None:
    p = command(
        sub, "teaming",
        "Compare AI-only, human-only and human+AI teams: N trials of each in one environment, people joining "
        "by their seats' links (or scripted stand-ins), a table of returns by mode, a plot and the data.",
    )  # fmt: skip
    p.add_argument(
        "spec_file", metavar="SPEC", help="the spec file, or a shipped example's name; it declares both implementations"
    )
    p.add_argument("--agent", required=True, metavar="IMPL", help="the agent implementation that plays AI seats")
    p.add_argument(
        "--person-impl", required=True, metavar="IMPL",
        help="the client implementation (client: true) that people play",
    )  # fmt: skip
    p.add_argument("--trials", type=positive_int, default=5, metavar="N", help="trials per mode (default 5)")
    p.add_argument(
        "--modes", default="ai,human,mixed", metavar="LIST",
        help="which teams, comma-separated: ai (every seat the agent), human (every seat a person), mixed "
        "(the first seat a person, the others the agent); default %(default)s",
    )  # fmt: skip
    p.add_argument(
        "--scripted", nargs="?", const="trialog.tools.person:random_person", metavar="MODULE:FUNCTION",
        help="stand-in people instead of real ones: each seat played through the gateway's socket by this "
        "function of what the page receives (alone: %(const)s, a random valid action)",
    )  # fmt: skip
    p.add_argument(
        "--max-ticks", type=positive_int, metavar="N", help="end each trial after N ticks (default: the spec's)"
    )
    p.add_argument("--seed", type=int, help="trial i of every mode gets seed N+i (default: the spec's, else per trial)")
    p.add_argument("--concurrency", type=positive_int, default=1, metavar="N", help="trials at once (default 1)")
    p.add_argument("--actor", help="compare this actor's return (default: the sum over actors)")
    p.add_argument("--experiment", default="teaming", help="the label of the trials in the log (default %(default)s)")
    p.add_argument(
        "--out", default="trialog-plots", metavar="DIR",
        help="where teaming.png, teaming.csv and teaming.json go (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--local", action="store_true",
        help="also run the spec's services and a web gateway locally for the evaluation's duration "
        "(join links then start with http://127.0.0.1:PORT unless --gateway-url names another address)",
    )  # fmt: skip
    p.add_argument(
        "--gateway-port", type=positive_int, default=8000, help="with --local: the gateway's port (default 8000)"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from trialog.spec import load_spec
    from trialog.tools import teaming
    from trialog.tools.demo import example_spec

    require_extra("websockets", "gateway", "trialog teaming")
    require_extra("matplotlib", "plot", "trialog teaming's plot")
    settings = from_args(args)
    spec_file = example_spec(args.spec_file)
    spec = load_spec(spec_file)
    modes = teaming.parse_modes(args.modes)
    for mode in modes:  # the implementations are checked before anything starts
        teaming.mode_implementations(spec, mode, args.agent, args.person_impl)
    scripted = None
    if args.scripted:
        from trialog.tools.person import load_person

        scripted = load_person(args.scripted)

    def evaluate(settings) -> list:
        return run_async(
            teaming.run_teaming(
                settings, spec, modes, args.trials, agent=args.agent, person_impl=args.person_impl, scripted=scripted,
                max_ticks=args.max_ticks, seed=args.seed, concurrency=args.concurrency, experiment=args.experiment,
            )
        )  # fmt: skip

    if args.local:
        from trialog.tools.campaign import create_topics, local_services

        if settings.gateway_url == Settings().gateway_url:  # unless people reach it by another address
            settings = dataclasses.replace(settings, gateway_url=f"http://127.0.0.1:{args.gateway_port}")
        run_async(create_topics(settings, local_instances=1))
        print(f"starting the services for {spec.name} and the gateway on port {args.gateway_port}…", file=sys.stderr)
        with local_services(settings, str(Path(spec_file).resolve()), gateway_port=args.gateway_port):
            trials = evaluate(settings)
    else:
        if scripted is None:
            print(f"people join through the gateway at {settings.gateway_url} (the gateway_url setting)", flush=True)
        trials = evaluate(settings)

    rows = teaming.summaries(trials, modes, args.actor)
    print()
    print(teaming.table(rows))
    files = teaming.write_results(trials, rows, args.out, spec=spec.name, actor=args.actor)
    print(f"\nplot: {files.png} (data: {files.csv}, {files.json})")
    problems = teaming.check_ended(trials)
    teaming.print_problems(problems)
    return 1 if problems else 0
