"""A crowd of sockets from another process (an attacker is another machine): opens every
URL given on stdin (a JSON list) at once and prints, as JSON, how each was answered —
the first message's type (``refused <close code>`` for refusals), ``http <status>`` for
a refused handshake, or ``no answer`` / ``error <kind>``.

    echo '["ws://…", …]' | python -m tests.gateway.crowd
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import Counter

import websockets


async def one(url: str, outcomes: Counter) -> None:
    try:
        async with websockets.connect(url, open_timeout=60) as ws:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 60))
            kind = msg["type"]
            if kind == "refused":
                with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
                    await asyncio.wait_for(ws.recv(), 10)
                kind = f"refused {ws.close_code}"
            outcomes[kind] += 1
    except websockets.InvalidStatus as exc:
        outcomes[f"http {exc.response.status_code}"] += 1
    except TimeoutError:
        outcomes["no answer"] += 1
    except Exception as exc:  # counted, never raised: the crowd reports what it met
        outcomes[f"error {type(exc).__name__}"] += 1


async def main() -> None:
    outcomes: Counter = Counter()
    await asyncio.gather(*(one(url, outcomes) for url in json.load(sys.stdin)))
    print(json.dumps(outcomes))


if __name__ == "__main__":
    asyncio.run(main())
