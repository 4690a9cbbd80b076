"""``trialog plot``: trial returns as a picture, with its data beside it (:mod:`trialog.tools.plot`)."""

from __future__ import annotations

from trialog.commands.parts import command, run_async
from trialog.settings import from_args


def add(sub) -> None:
    p = command(
        sub, "plot", "Plot trial returns (PNG, with the data beside it as CSV and JSON), from the log or an archive."
    )
    p.add_argument(
        "--out", default="trialog-returns.png", metavar="FILE.png",
        help="the picture (default: %(default)s); FILE.csv and FILE.json are written beside it",
    )  # fmt: skip
    p.add_argument("--from-archive", metavar="DIR", help="read the logger's archive instead of the topics")
    p.add_argument(
        "--by", choices=["pairing", "phase"], default="pairing",
        help="one series per implementation pairing or per experiment phase",
    )  # fmt: skip
    p.add_argument(
        "--per", choices=["trial", "sample"], default="trial", help="x axis: trials, or samples (tick × actor) so far"
    )
    p.add_argument("--actor", help="plot this actor's return (default: the sum over actors)")
    p.add_argument(
        "--rolling", type=int, default=10, metavar="N",
        help="also draw the mean of the last N trials (default %(default)s; 0: off)",
    )  # fmt: skip
    p.set_defaults(func=_plot_command)


def _plot_command(args) -> int:
    from trialog.tools.plot import plot_returns, returns_from_archive, returns_from_log

    spec = None
    if args.spec:  # as in `trialog export`: the --spec flag filters by spec name (a file stands for its name)
        from trialog.commands.datalog import _spec_name

        spec = _spec_name(args.spec)
    if args.from_archive:
        trials = returns_from_archive(args.from_archive, spec)
    else:
        from trialog.bus import connect

        async def go():
            async with connect(from_args(args)) as bus:
                return await returns_from_log(bus, spec)

        trials = run_async(go())
    files = plot_returns(trials, args.out, by=args.by, x=args.per, actor=args.actor, rolling=args.rolling)
    print(f"{len(trials)} trial(s) plotted: {files.png} (data: {files.csv}, {files.json})")
    return 0
