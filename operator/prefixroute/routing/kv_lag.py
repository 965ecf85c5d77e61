"""Whether a front keeps up with a member's KV events: a view applied late is a stale view.

Every message carries the time the engine published it (vLLM's batch `ts`, engine-sim's
too, both the engine's wall clock). The edge measures, for each live message it applies,
how long after that it was applied (the lag) and whether more messages are already waiting
(a backlog). A front that cannot apply a fleet's events as fast as they come falls behind:
its view of the member is older than the requests it routes by it, and routing from it
sends them where a prefix was, not where it is.

`LagJudge` decides from those two figures alone, so the clock that measures them belongs to
the edge (and to tests): a member is *behind* when a message was applied more than
`behind_after` seconds after it was published and more wait; it is caught up again once
the backlog is drained (nothing waits: the view holds everything the engine said) or a
message arrives within half the threshold. The backlog condition keeps a member whose
engine's clock runs ahead of ours (every lag too long, but nothing left to apply) from
being judged behind; the half keeps one from flapping about the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BEHIND_AFTER_S = 1.0


@dataclass(slots=True)
class LagJudge:
    """One member's stream: behind or not, from each applied message's lag and the backlog."""

    behind_after: float = DEFAULT_BEHIND_AFTER_S
    behind: bool = False

    def observe(self, lag: float, backlog: bool) -> bool:
        """A live message was applied `lag` seconds after it was published, with more messages
        waiting (`backlog`) or not. True when that changed `behind`."""
        if self.behind:
            if backlog and lag > self.behind_after / 2:
                return False
            self.behind = False
            return True
        if backlog and lag > self.behind_after:
            self.behind = True
            return True
        return False

    def reset(self) -> None:
        """The stream starts afresh (a new connection, a resync): nothing is waiting on it yet."""
        self.behind = False
