"""Wait for a condition with a deadline (never a bare sleep)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """True as soon as `predicate()` holds; False if it still does not after `timeout` seconds."""
    tick = threading.Event()
    for _ in range(max(1, int(timeout / interval))):
        if predicate():
            return True
        tick.wait(interval)
    return predicate()
