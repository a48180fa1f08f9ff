"""Structured logs: one JSON object per line on stderr, level from DRIFTBUS_LOG_LEVEL.

Only the service shells log. Messages about objects already start with ``Kind/ns/name`` and have
been scrubbed by the code that built them; nothing here prints request bodies.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import orjson

_STANDARD = set(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure(service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    level = os.environ.get("DRIFTBUS_LOG_LEVEL", "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SystemExit(
            f"driftbus {service}: DRIFTBUS_LOG_LEVEL={level!r}: expected DEBUG, INFO, WARNING "
            "or ERROR"
        )
    root.setLevel(level)
    logging.getLogger("nats").setLevel(logging.WARNING)
    logging.getLogger("driftbus").info("starting %s", service)
