"""Python client of braid's job system.

Connect with the server's URL and a join token (``braid token create
--role client`` prints one; it pins the server's TLS certificate), upload
data, submit jobs and wait for their outputs::

    import braid

    c = braid.Client("https://10.0.0.1:7400", token=JOIN_TOKEN)
    blob = c.put("book.txt")
    job = c.submit("wordcount", blob, split="lines:1M", merge="reduce:sumcounts")
    c.get(job.result(), "counts.txt")

Everything goes through :class:`Client`; errors are the typed exceptions
of :mod:`braid.errors`, also importable from here. The package needs only
Python's standard library.
"""

from .client import (CANCELED, DONE, FAILED, QUEUED, RUNNING, Client, Job, JobStatus, Pipeline, PipelineStatus,
                     UnitCounts, as_completed, wait)
from .errors import (APIError, AuthError, BadRequest, BraidError, CertificateError, ConfigurationError, Conflict,
                     Forbidden, Gone, InsufficientStorage, IntegrityError, JobCanceled, JobFailed, NotFound,
                     ServerError, TooLarge, Unreachable, WaitTimeout)
from .progress import Progress

__version__ = "0.1.0"

__all__ = [
    "Client", "Job", "JobStatus", "Pipeline", "PipelineStatus", "UnitCounts", "Progress", "as_completed", "wait",
    "QUEUED", "RUNNING", "DONE", "FAILED", "CANCELED",
    "BraidError", "ConfigurationError", "Unreachable", "CertificateError", "IntegrityError", "WaitTimeout",
    "JobFailed", "JobCanceled", "APIError", "BadRequest", "AuthError", "Forbidden", "NotFound", "Gone",
    "Conflict", "TooLarge", "InsufficientStorage", "ServerError",
]
