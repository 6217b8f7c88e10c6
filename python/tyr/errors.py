"""The exceptions of tyr: one class per error class of the server.

Every exception is a :class:`Error`, carrying the code of the C API
(``code``), its text (``message``), and whether the failed call certainly
changed nothing (``refused``) and whether sending it again can succeed
(``retryable``).
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, Type

from . import _lib

__all__ = [
    "Error",
    "NotFoundError",
    "ExistsError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "TooLargeError",
    "UnavailableError",
    "OutcomeUnknownError",
    "ConflictError",
    "CorruptionError",
    "NoSpaceError",
    "TimeoutError",
    "error_for",
]


class Error(Exception):
    """An error of tyr.

    Attributes:
        code: the C API's code (``tyr_code``; see ``libtyr/tyr.h``).
        message: the error's text, naming its class first.
        refused: the call certainly changed nothing (and never will).
        retryable: sending the same request again can succeed.
    """

    code: int
    message: str
    refused: bool
    retryable: bool

    def __init__(self, message: str, code: int = _lib.UNKNOWN, flags: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.flags = flags
        self.refused = bool(flags & _lib.FLAG_REFUSED)
        self.retryable = bool(flags & _lib.FLAG_RETRYABLE)

    @property
    def outcome_unknown(self) -> bool:
        """Whether the call's answer was lost and its outcome could not be learnt."""
        return bool(self.flags & _lib.FLAG_OUTCOME_UNKNOWN)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code}, flags={self.flags})"

    def __reduce__(self) -> Any:
        # Pickles (for multiprocessing) as the same class with the same fields.
        return (_rebuild, (type(self), self.message, self.code, self.flags))


def _rebuild(cls: Type[Error], message: str, code: int, flags: int) -> Error:
    return cls(message, code=code, flags=flags)


class NotFoundError(Error, LookupError):
    """The blob or keyspace does not exist."""


class ExistsError(Error):
    """The blob or keyspace already exists."""


class InvalidArgumentError(Error, ValueError):
    """The request is malformed (a bad name, width, mode, ...), or a handle is closed."""


class OutOfRangeError(Error):
    """An offset or size lies outside what the blob allows."""


class TooLargeError(Error):
    """The request carries more than a limit allows (one request's data, a key, ...)."""


class UnavailableError(Error):
    """The server or cluster cannot serve the request now; retrying later may help."""


class OutcomeUnknownError(UnavailableError):
    """A commit's answer was lost and its outcome could not be learnt: it may or may not have taken effect."""


class ConflictError(Error):
    """A transaction conflicted (a blob it read changed) or a compare-and-swap failed; nothing changed."""


class CorruptionError(Error):
    """Stored data failed its integrity check."""


class NoSpaceError(Error):
    """The server is short of disk space and refuses writes."""


class TimeoutError(Error, builtins.TimeoutError):
    """The call's deadline (the client's timeout) passed."""


_BY_CODE: Dict[int, Type[Error]] = {
    _lib.NOT_FOUND: NotFoundError,
    _lib.EXISTS: ExistsError,
    _lib.INVALID_ARGUMENT: InvalidArgumentError,
    _lib.OUT_OF_RANGE: OutOfRangeError,
    _lib.TOO_LARGE: TooLargeError,
    _lib.UNAVAILABLE: UnavailableError,
    _lib.CONFLICT: ConflictError,
    _lib.CORRUPTION: CorruptionError,
    _lib.NO_SPACE: NoSpaceError,
    _lib.TIMEOUT: TimeoutError,
}


def error_for(code: int, flags: int, message: str) -> Error:
    """The exception for a failed call's code, flags and message."""
    if code == _lib.UNAVAILABLE and flags & _lib.FLAG_OUTCOME_UNKNOWN:
        return OutcomeUnknownError(message, code=code, flags=flags)
    cls = _BY_CODE.get(code, Error)
    return cls(message, code=code, flags=flags)


def from_status(code: int, st: Any) -> Error:
    """The exception for a call that returned code and filled the ``tyr_status`` st."""
    ffi = _lib.ffi
    message = ffi.string(st.message).decode("utf-8", "replace")
    if st.code != 0:
        code = st.code
    if not message:
        message = f"tyr: error code {code}"
    return error_for(code, st.flags, message)


def invalid(message: str) -> InvalidArgumentError:
    """An InvalidArgumentError raised before any request was sent (so refused)."""
    return InvalidArgumentError(message, code=_lib.INVALID_ARGUMENT, flags=_lib.FLAG_REFUSED)
