"""What mmengine's current logger records while a block runs."""
import contextlib
import logging
from typing import Iterator, List

from mmengine.logging import MMLogger


class _Records(logging.Handler):

    def __init__(self, messages: List[str]) -> None:
        super().__init__()
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged_messages() -> Iterator[List[str]]:
    """The messages ``MMLogger.get_current_instance()`` logs inside the block."""
    messages: List[str] = []
    handler = _Records(messages)
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
