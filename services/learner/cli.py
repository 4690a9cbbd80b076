"""``trialog serve learner`` (needs the ``learn`` extra: JAX, optax, safetensors)."""

from __future__ import annotations

from trialog.commands.parts import add_health_port, command, require_extra, run_async
from trialog.errors import TrialogError
from trialog.settings import from_args


def add(serve) -> None:
    p = command(
        serve,
        "learner",
        "Learn for one actor implementation from the log and publish its model's versions to `models`.",
    )
    add_health_port(p, "learner")
    p.add_argument(
        "--implementation", required=True, metavar="NAME", help="the actor implementation (a learning Policy) to train"
    )
    p.add_argument(
        "--experiment",
        default="",
        help="learn only from trials of this experiment (default: any experiment's heatup and train trials)",
    )
    p.add_argument(
        "--tensorboard",
        default="",
        metavar="DIR",
        help="write TensorBoard curves (loss, value estimates, versions) into DIR as it trains",
    )
    p.add_argument(
        "--learn-from",
        action="append",
        default=[],
        metavar="SENDER",
        help="learn only from the rewards of these senders (repeatable; shell patterns: env, env/*, "
        "'person:*' for the judges of the watch page, an actor's name); default: every source",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    require_extra("jax", "learn", "trialog serve learner")
    from trialog.bus import connect
    from trialog.services.learner.main import main
    from trialog.spec import load_spec

    settings = from_args(args)
    files = [f for f in settings.spec.split(",") if f.strip()]
    if len(files) != 1:
        raise TrialogError("the learner takes exactly one --spec (the one naming the implementation it trains)")
    bus = connect(settings)
    spec = load_spec(files[0], bus.store)
    run_async(
        main(
            bus,
            spec,
            args.implementation,
            experiment=args.experiment,
            health_port=args.health_port,
            tensorboard=args.tensorboard,
            learn_from=tuple(args.learn_from),
        )
    )
    return 0
