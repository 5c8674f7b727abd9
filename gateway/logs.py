"""Structured JSON logs with a request id (G9), scrubbed of every resolved secret (G6)."""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar

from gateway.secrets import SecretSet

request_id_var: ContextVar[str | None] = ContextVar("toolgate_request_id", default=None)

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id and any `extra` fields."""

    def __init__(self, secrets: SecretSet | None = None) -> None:
        super().__init__()
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        line = json.dumps(entry, default=str, ensure_ascii=False)
        return self._secrets.scrub(line) if self._secrets is not None else line


THIRD_PARTY_LEVEL = "WARNING"
"""Level of the root logger: libraries' warnings and errors (the MCP SDK's tracebacks among them)
reach stderr as our JSON lines, scrubbed, never through Python's last-resort handler."""


def configure_logging(level: str, secrets: SecretSet | None = None) -> None:
    """Send every log line to stderr as scrubbed JSON: the `toolgate` and `uvicorn` loggers at
    `level`, everything else (the MCP SDK, httpx2, ...) through the root logger at WARNING.
    Called by `toolgate serve`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(THIRD_PARTY_LEVEL)
    for name in ("toolgate", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # toolgate logs one line per request itself
