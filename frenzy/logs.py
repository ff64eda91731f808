"""Structured JSON-lines logging. Pass ids as keyword fields: log.info("placed", job_id=...)."""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "service": record.name,
            "msg": record.getMessage(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class StructuredLogger(logging.LoggerAdapter):
    """A logger whose calls take fields as keywords (job_id=..., node_id=...)."""

    def process(self, msg: str, kwargs: Any) -> tuple[str, Any]:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("exc_info", "stack_info", "stacklevel", "extra")}
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **fields}
        return msg, kwargs


def setup_logging(level: str = "INFO", stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel("WARNING")
    logging.Formatter.converter = time.gmtime


def get_logger(service: str) -> StructuredLogger:
    return StructuredLogger(logging.getLogger(service), {})
