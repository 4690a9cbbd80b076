"""The command line and controller at their edges: bad counts and limits refused up
front, clear errors instead of tracebacks, exit codes that tell the truth."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trialog import cli
from trialog.bus.memory import MemoryBus
from trialog.commands.demo import campaign_args
from trialog.commands.parts import trial_overrides
from trialog.controller import Controller, TrialOutcome
from trialog.errors import TrialError, TrialTimeout
from trialog.protocol.events import StartRequest, TrialRecord
from trialog.protocol.topics import CONTROL, TRIALS
from trialog.services.orchestrator.resolve import resolve
from trialog.spec import load_spec
from trialog.telemetry import logs
from trialog.tools.campaign import campaign_overrides, wait_indexed
from trialog.tools.demo import DEMOS, demo_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "spec.yaml", "--concurrency", "0"],
        ["run", "spec.yaml", "--trials", "-1"],
        ["run", "spec.yaml", "--max-ticks", "-5"],
        ["trial", "start", "rps", "--max-ticks", "0"],
    ],
)
def test_counts_and_limits_below_one_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_a_campaign_seeds_trials_as_its_help_says():
    assert "seed" not in campaign_overrides({})(0)
    assert [campaign_overrides({"seed": 10})(i)["seed"] for i in range(3)] == [10, 11, 12]
    turns = campaign_overrides({}, [{"alice": "a"}, {"alice": "b"}])
    assert [turns(i)["implementations"] for i in range(3)] == [{"alice": "a"}, {"alice": "b"}, {"alice": "a"}]


def test_a_trial_ended_by_an_error_fails_the_campaign():
    assert TrialOutcome("t", {}, reason="error").failed
    assert TrialOutcome("t", {}, error="rejected: no such spec").failed
    assert not TrialOutcome("t", {}, reason="max_ticks").failed


def test_the_demo_campaign_has_every_argument_of_trialog_run():
    # The demo builds `trialog run`'s arguments itself; a flag added to `run` must not break it.
    demo_args = cli.build_parser().parse_args(["demo"])
    for game, (spec_file, _pairings) in DEMOS.items():
        args = campaign_args(demo_args, spec_file)
        assert trial_overrides(args) == {}, game
        assert args.spec_file.endswith(spec_file) and args.serve


def test_trialog_run_takes_a_shipped_example_by_its_name(tmp_path, monkeypatch):
    from trialog.tools.demo import EXAMPLES, example_spec

    monkeypatch.chdir(tmp_path)  # any folder: a wheel install has no examples/ beside it
    for name in ("rps", "overcooked", "cartpole"):
        assert Path(example_spec(name)) == EXAMPLES / name / "spec.yaml"
        assert load_spec(example_spec(name)).name == name
    (tmp_path / "rps").mkdir()  # a file or folder of that name is the user's: left alone
    assert example_spec("rps") == "rps"
    assert example_spec("no-such-example") == "no-such-example"
    assert example_spec("mine/spec.yaml") == "mine/spec.yaml"


def test_the_demo_honours_the_topic_prefix_of_the_environment():
    assert demo_settings("h:1", environ={}).topic_prefix == "trialog-demo."
    assert demo_settings("h:1", environ={"TRIALOG_TOPIC_PREFIX": "mine."}).topic_prefix == "mine."


async def test_the_controller_refuses_an_empty_trial_id_and_a_negative_max_ticks(memory_settings):
    async with Controller(MemoryBus(memory_settings)) as ctl:
        with pytest.raises(TrialError, match="empty"):
            await ctl.start_trial("rps", trial_id="")
        with pytest.raises(TrialError, match="control characters"):
            await ctl.start_trial("rps", trial_id="a\nb")
        with pytest.raises(TrialError, match="at least 1"):
            await ctl.start_trial("rps", max_ticks=-3)


async def test_no_orchestrator_is_a_clear_timeout_not_a_bare_one(memory_settings):
    async with Controller(MemoryBus(memory_settings)) as ctl:
        tid = await ctl.start_trial("rps")
        with pytest.raises(TrialTimeout, match="no orchestrator answered") as raised:
            await ctl.wait_started(tid, timeout=0.2)
        assert isinstance(raised.value, TimeoutError)  # asyncio code catching TimeoutError still does


@pytest.mark.parametrize(
    "fields, problem",
    [({"trial_id": ""}, "empty"), ({"max_ticks": -4}, "at least 1"), ({"max_ticks": 0}, "at least 1")],
)
def test_the_orchestrator_rejects_what_a_forged_request_could_carry(fields, problem):
    spec = load_spec(ROOT / "examples" / "rps" / "spec.yaml")
    request = StartRequest(**{"trial_id": "t-1", "spec": spec.name, "requested_by": "x", **fields})
    with pytest.raises(TrialError, match=problem):
        resolve(spec, request)


def test_a_closed_output_pipe_ends_a_command_quietly():
    """`trialog ... | head`: no BrokenPipeError traceback; the exit code of a Unix tool
    stopped by SIGPIPE."""
    script = (
        "import trialog.settings as s; s.Settings.describe = lambda self: [('name', 'value', 'help')] * 200000; "
        "from trialog import cli; raise SystemExit(cli.main(['settings']))"
    )
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'{sys.executable} -c "{script}" | head -n 1'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.stdout.count("\n") == 1
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
    assert out.returncode == 141


def test_standard_library_log_lines_stay_json(capsys):
    """aiokafka logs through the standard library: in JSON mode its lines are JSON too."""
    logs.configure("json")
    try:
        logging.getLogger("aiokafka.consumer.group_coordinator").warning("OffsetCommit failed for group %s", "g")
        logs.get_logger("trialog.test").warning("ours", n=1)
    finally:
        logs.configure("console")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert {
        "event": "OffsetCommit failed for group g",
        "logger": "aiokafka.consumer.group_coordinator",
        "level": "warning",
    }.items() <= lines[0].items()
    assert lines[1]["event"] == "ours" and lines[1]["n"] == 1


def test_a_command_whose_extra_is_missing_says_how_to_install_it():
    """Commands needing an extra are always listed; run without it, they name the extra."""
    from trialog.commands.parts import require_extra
    from trialog.errors import TrialogError

    with pytest.raises(TrialogError, match=r"pip install 'trialog\[datalog\]'"):
        require_extra("no_such_module_for_trialog", "datalog", "trialog export")
    help_text = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    ).stdout
    for command in ("replay", "export", "plot", "check", "demo"):
        assert command in help_text


def test_health_ports_handed_to_two_services_differ_and_are_free_and_below_the_ephemeral_range(monkeypatch):
    import socket as socket_module

    from trialog.tools import campaign

    busy = {20002}  # a port someone holds: its probe's bind fails
    drawn = iter([20001, 20001, 20002, 20003])  # the same port comes up twice, then a busy one
    bound = []

    class Probe:
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            bound.append(address)
            if address[1] in busy:
                raise OSError(98, "Address already in use")

    monkeypatch.setattr(campaign, "_HANDED_OUT", set())
    monkeypatch.setattr(campaign, "_ephemeral_low", lambda: 32768)
    monkeypatch.setattr(campaign.random, "randrange", lambda low, high: next(drawn))
    monkeypatch.setattr(socket_module, "socket", Probe)
    assert [campaign.free_port(), campaign.free_port()] == [20001, 20003]
    assert all(host == "0.0.0.0" for host, _ in bound)  # probed where the child's health server binds


def test_a_real_health_port_is_free_and_below_the_ephemeral_range():
    from trialog.tools import campaign

    port = campaign.free_port()
    assert 1024 <= port < campaign._ephemeral_low()
    with socket.socket() as s:
        s.bind(("0.0.0.0", port))


def test_chaos_refuses_a_negative_broker_downtime_before_starting_anything():
    done = subprocess.run(
        [sys.executable, "tools/chaos.py", "--broker-down", "-1"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 2 and "--broker-down must be 0 or more seconds" in done.stderr


async def test_a_served_campaign_keeps_the_orchestrator_until_the_index_says_its_trials_ended(memory_settings, capsys):
    # The orchestrator indexes a trial.ended once it reads it back, a moment after the
    # campaign saw it; `trialog run --serve` stopped the services at once, and then
    # `trialog trial list` could show the trial running until the orchestrator ran again.
    bus = MemoryBus(memory_settings)
    await bus.publish(TRIALS, TrialRecord("trial-a", status="running", spec="rps"))
    waiting = asyncio.create_task(wait_indexed(bus, ["trial-a"], timeout=10))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await bus.publish(TRIALS, TrialRecord("trial-a", status="ended", spec="rps"))
    assert await asyncio.wait_for(waiting, 5) is True
    # An index that never catches up: the wait says so, bounded, and the services stop anyway.
    await bus.publish(TRIALS, TrialRecord("trial-b", status="running", spec="rps"))
    assert await wait_indexed(bus, ["trial-a", "trial-b"], timeout=0.3) is False
    assert "does not yet say that 1 trial(s) ended, e.g. trial-b" in capsys.readouterr().err


async def test_a_controller_that_only_asks_reads_no_events_and_keeps_nothing(memory_settings):
    """The gateway's lobby starts trials and follows them in its own feed: its controller
    must not read (and look at) every record of every trial, nor keep each trial it started."""
    bus = MemoryBus(memory_settings)
    async with Controller(bus, name="lobby", watch=False) as ctl:
        tid = await ctl.start_trial("rps", implementations={"bob": "human"})
        assert ctl._consumer is None and ctl._task is None
        assert ctl._watches == {} and ctl._returns == {}
        with pytest.raises(TrialError, match="does not watch"):
            await ctl.wait_started(tid, timeout=0.1)
        with pytest.raises(TrialError, match="does not watch"):
            await anext(ctl.watch())
        consumer = bus.consumer([CONTROL])
        await consumer.start()
        (request,) = await consumer.poll(timeout_ms=100)
        await consumer.stop()
    start = bus.codec.decode(request.value, request.header("kind"))
    assert isinstance(start, StartRequest) and start.trial_id == tid and start.requested_by == "lobby"
