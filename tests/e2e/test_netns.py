"""e2e/netns.py: a visit to a second namespace hands the thread back to the one it was in."""

from __future__ import annotations

import os
import threading

import pytest

from e2e import netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _in_a_thread(body):  # type: ignore[no-untyped-def]
    """Run `body` on a thread of its own: setns moves only the calling thread, so the test
    process's other threads (and the next test) keep the host's namespace whatever happens."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = body()
        except BaseException as exc:  # handed to the test below
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


def test_a_visit_returns_to_the_namespace_the_thread_was_in_not_the_hosts() -> None:
    session, module = f"pr-test-session-{os.getpid()}", f"pr-test-module-{os.getpid()}"
    netns.create(session, [])
    netns.create(module, [])
    try:

        def visit() -> tuple[bool, bool, bool]:
            netns.enter(session)  # as conftest's session cluster does
            with netns.visiting(module):  # as a module's own cluster does
                inside_module = netns.inside(module)
            return inside_module, netns.inside(session), netns.inside(module)

        assert _in_a_thread(visit) == (True, True, False)
    finally:
        netns.delete(module)
        netns.delete(session)
