"""Typed exceptions of the braid client.

Every exception the client raises on purpose is a :class:`BraidError`.
The server's answers become :class:`APIError` subclasses by HTTP status,
carrying the server's message (which says what is wrong and, where the
caller can fix it, how)::

    BraidError
    ├── ConfigurationError      bad arguments: a malformed token, no way to pin
    ├── Unreachable             no answer: the server is down or the URL wrong
    ├── CertificateError        the server's TLS certificate is not the pinned one
    ├── IntegrityError          a download was cut short or does not hash to its id
    ├── WaitTimeout             a wait ran out of time (also a TimeoutError)
    ├── JobFailed               a job ended failed; .status says why
    │   └── JobCanceled         ... or was canceled
    └── APIError                an error answer: .status, .message, .op
        ├── BadRequest          400
        ├── AuthError           401: wrong or revoked token, other cluster key
        │   └── Forbidden       403: the token's role may not do this
        ├── NotFound            404: no such blob, job, operation or pipeline
        │   └── Gone            410: a job's output removed after retention
        ├── Conflict            409
        ├── TooLarge            413: larger than the server's --max-upload
        ├── InsufficientStorage 507: the server's --max-data or disk is full
        └── ServerError         other 5xx
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover
    from .client import JobStatus


class BraidError(Exception):
    """Base class of every error the braid client raises on purpose."""


class ConfigurationError(BraidError, ValueError):
    """The client was given something it cannot use: a malformed join token
    or fingerprint, an unreadable key file, or no way to check the server's
    certificate. Nothing was sent."""


class Unreachable(BraidError, ConnectionError):
    """The server could not be reached: it is not running, the URL names the
    wrong host or port, or the network is down. ``connected`` is False when
    no connection could be made (refused, timed out), so the request cannot
    have arrived; True when it may have (no answer came)."""

    def __init__(self, url: str, cause: BaseException, *, connected: bool = True) -> None:
        self.url = url
        self.cause = cause
        self.connected = connected
        super().__init__(
            f"cannot reach the braid server at {url}: {cause}; "
            "is it running (braid server) and is the URL right?"
        )


class CertificateError(BraidError):
    """The server's TLS certificate is not the pinned one, or the server
    could not prove that it holds the cluster key for it. No credential was
    sent."""


class IntegrityError(BraidError):
    """A download stopped early or its bytes do not hash to the blob's id:
    nothing was written to the destination."""


class WaitTimeout(BraidError, builtins.TimeoutError):
    """A wait ended before the job (or pipeline) did. The job keeps running;
    wait again to see it finish."""


class JobFailed(BraidError):
    """A job ended in state failed; :attr:`status` is its last status and
    :attr:`message` the server's reason, naming the unit that failed."""

    def __init__(self, status: "JobStatus", step: Optional[str] = None) -> None:
        self.status = status
        self.job = status.job
        self.step = step
        self.message = status.error or status.state
        where = f"job {status.job}" + (f" (step {step})" if step else "")
        super().__init__(f"{where} {status.state}: {self.message}")


class JobCanceled(JobFailed):
    """A job ended in state canceled."""


class APIError(BraidError):
    """An error answer from the server.

    Attributes:
        op: what the client did, e.g. ``"submit job"``.
        status: the HTTP status code.
        message: the server's message.
    """

    def __init__(self, op: str, status: int, message: str) -> None:
        self.op = op
        self.status = status
        self.message = message
        super().__init__(f"{op}: {message} (HTTP {status})")


class BadRequest(APIError):
    """400: the request is invalid; the message says what to change."""


class AuthError(APIError):
    """401: no valid credential: the token is unknown or revoked, or the
    cluster key differs from the server's."""


class Forbidden(AuthError):
    """403: the credential's role may not make this request."""


class NotFound(APIError):
    """404: no such blob, job, operation, pipeline or worker."""


class Gone(NotFound):
    """410: the blob was a job's output and was removed after the server's
    retention period (braid server --retain)."""


class Conflict(APIError):
    """409: the resource's state forbids the request."""


class TooLarge(APIError):
    """413: the upload exceeds the server's limit (braid server --max-upload)."""


class InsufficientStorage(APIError):
    """507: the server's data limit (braid server --max-data) or disk is full."""


class ServerError(APIError):
    """A 5xx answer other than 507: the server failed; its log says more."""


_BY_STATUS: Dict[int, Type[APIError]] = {
    400: BadRequest,
    401: AuthError,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: TooLarge,
    507: InsufficientStorage,
}


def api_error(op: str, status: int, message: str) -> APIError:
    """Returns the APIError subclass for an HTTP status."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else APIError
    return cls(op, status, message)
