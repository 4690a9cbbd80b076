"""What the actor and the environment conformance runs share: topics of their own, a
command under test given only the keys a deployment would give it, and the report."""

from __future__ import annotations

import base64
import dataclasses
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from trialog.bus.base import Bus
from trialog.errors import TrialogError
from trialog.settings import Settings
from trialog.tools.conformance.checks import Check, report
from trialog.trust.keys import Keyring


def own_topics(settings: Settings) -> Settings:
    """The settings with a topic prefix of this run's own, under the deployment's."""
    return dataclasses.replace(settings, topic_prefix=f"{settings.topic_prefix}conformance-{uuid.uuid4().hex[:8]}.")


def keyless_env(settings: Settings) -> dict[str, str]:
    """The environment of the command under test: the settings' variables, without any
    key (no TRIALOG_KEY_*, an empty TRIALOG_KEYRING) until :func:`give_key` adds one."""
    from trialog.tools.campaign import _settings_env

    env = {k: v for k, v in _settings_env(settings).items() if not k.startswith("TRIALOG_KEY_")}
    env["TRIALOG_KEYRING"] = ""
    return env


def give_key(env: dict[str, str], keyring: Keyring, key_id: str) -> None:
    """Gives the command key_id's secret from the operator's keyring, as TRIALOG_KEY_<ID>."""
    secret = keyring.key(key_id)
    if secret is None:
        raise TrialogError(
            f"the keyring ({keyring.source}) cannot give {key_id}: conformance needs the operator's keyring"
        )
    env["TRIALOG_KEY_" + key_id.upper().replace(".", "_").replace("-", "_")] = (
        base64.urlsafe_b64encode(secret).rstrip(b"=").decode()
    )


async def run_checks(bus: Bus, logs: Path, suite: Callable[[], Awaitable[list[Check]]]) -> int:
    """Runs the suite on the run's topics and reports its checks; the exit code."""
    async with bus:
        await bus.create_topics()
        checks = await suite()
    code = report(checks)
    if code:
        print(f"--- the logs of the command under test are in {logs}", file=sys.stderr)
    return code
