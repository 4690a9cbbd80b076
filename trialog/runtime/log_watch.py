"""Is the log there, for one service loop? The clock its deadlines are measured on.

A broker lost, or a cluster without its quorum, stalls every write and every fetch for
seconds (a leader's loss: until the cluster fences it, ~10 s). Deadlines measured on the
host's clock would turn that stall into actor timeouts and ended trials: an outage of the
infrastructure counted against the actors (docs/reliability.md, "Deadlines"). So each
service loop keeps a :class:`LogWatch`:

* **away** — no fetch answered for the partition answered longest ago, or a write of this
  loop unacknowledged, for LOG_AWAY_S. The watch's clock (:meth:`LogWatch.time`) stops
  from about the last answer, so all of the outage is left out.
* **stalled** — the loop itself did not turn for STALLED_S (waiting inside the Kafka client
  for a lost group coordinator, or for the CPU): it could read nothing, and saw nothing of the
  outage; counted as away from its last watch.
* **back** — answered again for LOG_BACK_S: the other services' producers find the new
  leader later than this loop's fetches do, retrying, and their records are still coming.
* **sure** — not away, and answered within LOG_SURE_S: a response or inactivity deadline
  falls only then. Between a broker's loss and LOG_AWAY_S the loss is not yet known, and a
  deadline falling there would count the first seconds of the outage.

One line per process says the log is away (since when, what waits) and one that it is back;
``trialog_log_away`` says the same to a scraper, and ``/readyz`` answers not ready meanwhile.
"""

from __future__ import annotations

import time

from trialog.telemetry.logs import connectivity_lines_held, get_logger

log = get_logger(__name__)

LOG_AWAY_S = 2.0  # no fetch answered (idle, one comes every 0.5 s) nor write acknowledged: away
LOG_BACK_S = 3.0  # answered this long again: back (the others' producers find the new leader later, retrying)
LOG_SURE_S = 1.0  # a response or inactivity deadline falls only if the log answered this recently
STALLED_S = 2.0  # a loop whose watches (every tick interval, 0.2 s) are this far apart was stalled


class LogWatch:
    """The log's presence for one loop, from the seconds since it last answered (``watch``)."""

    # Loops of this process for which the log is away: the lines are said once per process.
    away_in_process = 0
    held_at_away = 0  # the Kafka client's connectivity lines held back when the away line was said

    def __init__(self, service: str) -> None:
        self.service = service
        self._away_since: float | None = None  # monotonic: since when the log is away
        self._away_total = 0.0  # seconds the log was away before that
        self._answered_since: float | None = None  # while away: since when it answers again
        self._quiet = 0.0  # seconds since the log last answered, at the last watch
        self._watched_at: float | None = None  # monotonic: the last watch

    def time(self) -> float:
        """The monotonic clock less the time the log was away: deadlines measured on it do not
        count an outage against actors or trials."""
        now = time.monotonic()
        return now - self._away_total - (now - self._away_since if self._away_since is not None else 0.0)

    @property
    def away(self) -> bool:
        return self._away_since is not None

    @property
    def sure(self) -> bool:
        return self._away_since is None and self._quiet < LOG_SURE_S

    def watch(self, now: float, quiet: float, waiting: int) -> None:
        """``quiet``: seconds since the log last answered this loop (fetch or write), at monotonic
        ``now``; ``waiting``: events this loop holds meanwhile (said in the line)."""
        # A loop that did not turn for seconds was waiting inside the Kafka client (a group's
        # coordinator lost: its poll waits for the rejoin) or for the CPU: it could read nothing
        # either, and its watch saw nothing meanwhile. That counts as the log away, from its last watch.
        stalled_since = (
            self._watched_at if self._watched_at is not None and now - self._watched_at >= STALLED_S else None
        )
        self._watched_at = now
        self._quiet = quiet = max(quiet, now - stalled_since if stalled_since is not None else 0.0)
        if quiet >= LOG_AWAY_S:
            self._answered_since = None
        elif self._away_since is not None and self._answered_since is None:
            self._answered_since = now
        if quiet >= LOG_AWAY_S and self._away_since is None:
            # From about the last answer (the client's oldest, capped: a partition held a while
            # is not an outage), or the last watch before a stall: all of the outage.
            self._away_since = stalled_since if stalled_since is not None else now - min(quiet, 2 * LOG_AWAY_S)
            LogWatch.away_in_process += 1
            if LogWatch.away_in_process == 1:
                LogWatch.held_at_away = connectivity_lines_held()
                log.warning(
                    "the log is away: writes held and retried, nothing committed past them, deadlines wait",
                    service=self.service,
                    since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - quiet)),
                    events_waiting=waiting,
                )
        elif self._away_since is not None and now - (self._answered_since or now) >= LOG_BACK_S:
            away, self._away_since, self._answered_since = now - self._away_since, None, None
            self._away_total += away
            LogWatch.away_in_process -= 1
            if LogWatch.away_in_process == 0:
                log.info(
                    "the log is back: deadlines run again",
                    service=self.service,
                    away_s=round(away),
                    client_lines_held=connectivity_lines_held() - LogWatch.held_at_away,
                )

    def close(self) -> None:
        """The loop stops: it no longer counts among the loops the log is away for."""
        if self._away_since is not None:
            self._away_since = None
            LogWatch.away_in_process -= 1
