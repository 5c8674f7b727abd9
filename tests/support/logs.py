"""Capture what a logger tree writes, as the gateway would format it."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.logs import JsonFormatter


@contextmanager
def captured_logs(name: str, level: int = logging.INFO) -> Iterator[io.StringIO]:
    """Every line logger `name` (and its children) writes while inside, one JSON object a line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(level)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
