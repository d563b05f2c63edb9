"""What a shared account runs beside its requests: the lease renewer and bounded cleanup,
so a hung store never holds the process's exit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .base import AccountError

__all__ = ["LeaseRenewer", "bounded"]

log = logging.getLogger("teamlead.governor")


class LeaseRenewer:
    """The thread of a shared account that keeps this process's leases alive.

    It calls ``renew`` every ``period_s`` from the first :meth:`start` until :meth:`stop`.
    A failed renewal is tried again at the next period: the leases expire by themselves
    meanwhile, and the account's next grant reports the failure.

    Args:
        renew: moves the expiry of this process's leases ahead.
        period_s: the time between renewals.
        name: the thread's name.
        stop_s: the longest :meth:`stop` waits for a renewal under way (the account's own
            bound on one call, so a hung store never holds the process's exit).
    """

    def __init__(
        self, renew: Callable[[], None], period_s: float, name: str, *, stop_s: float = 2.0
    ) -> None:
        self._renew = renew
        self._period = period_s
        self._name = name
        self._stop_s = stop_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start renewing (once; a no-op while running or after :meth:`stop`)."""
        if self._thread is None and not self._stopped.is_set():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._period):
            try:
                self._renew()
            except AccountError:
                continue
            except Exception:  # a thread that dies renews nothing more: keep going
                log.debug("renewing the leases failed", exc_info=True)

    def stop(self) -> None:
        """Stop renewing and wait (``stop_s`` at most) for a renewal under way; idempotent."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._stop_s)


def bounded(call: Callable[[], object], seconds: float, name: str) -> bool:
    """Run ``call`` in a daemon thread and wait ``seconds`` at most; whether it ended.

    For the best-effort cleanup of a shared account (give its leases back, close the
    connection) at the end of a run: each call to the store is bounded, but a store that
    answers slowly, or a client library's own wait, must not hold the process's exit. What
    was not given back expires by its own time; an error is the store's, and is let be.
    """

    def run() -> None:
        try:
            call()
        except Exception:  # best effort: the leases expire by their time to live
            log.debug("%s failed", name, exc_info=True)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    return not thread.is_alive()
