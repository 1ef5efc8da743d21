"""``--address``, ``--tracking-uri`` and ``--storage`` checked before a sweep writes anything.

Without these checks a wrong address is found out late and badly: the tracker has already created the
experiment and the parent run, and ``ray.init`` waits minutes for a cluster that is not there; a bucket that
is not there, or credentials it refuses, fail the first trial's first checkpoint, minutes in. Each
check waits at most ``SWEEP_CHECK_TIMEOUT_S`` seconds (30 unless set) and reads nothing but what it
checks; a failure is a :class:`~sweep.spec.variants.UsageError` (one line, exit 2).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import urllib.error
import urllib.request
from typing import Any, Callable
from urllib.parse import urlsplit

from results.reader import creation_lock, file_store_problem, sqlite_path
from sweep.spec.variants import UsageError, filesystem
from trainers.errors import first_line

TIMEOUT_ENV = "SWEEP_CHECK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0


def check_timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)


NO_ANSWER = object()
"""What :func:`within` returns when its call did not return in time."""


def within(timeout: float, call: Callable[[], Any]) -> Any:
    """``call()``'s value, the exception it raised, or :data:`NO_ANSWER` if it has not returned after
    ``timeout`` seconds (it runs on in a daemon thread: a store or endpoint that hangs cannot hold the
    driver)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:  # the caller says what it means
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else NO_ANSWER


def check_ray_address(address: str | None) -> None:
    """A cluster address (``host:port`` of its GCS, or ``ray://host:port`` of its Ray Client server) must
    accept a connection. No address, or ``auto`` (the cluster on this machine, which ``ray.init`` finds
    or refuses at once), needs no check."""
    if not address or address in ("auto", "local"):
        return
    target = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = target.hostname, target.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise UsageError(f"--address {address}: expected HOST:PORT or ray://HOST:PORT")
    timeout = check_timeout()
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise UsageError(f"--address {address}: no Ray cluster reachable within {timeout:g} s ({reason})") from None


ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Where an S3 client (pyarrow's, Ray's, boto3's) sends its requests when set, the first found first: a
non-AWS endpoint (MinIO, Ceph, moto); AWS's own otherwise."""


def check_storage(root: str) -> None:
    """A storage URI (``s3://BUCKET/PREFIX``, ``gs://...``) must name a bucket that exists and that the
    credentials in the environment may read, at an endpoint that answers. Opened with pyarrow, as Ray and
    :mod:`sweep.spec.variants` open it, so what passes here is what they will reach. A local path (or
    ``file://``) needs no check: Ray creates its folder."""
    if "://" not in root or urlsplit(root).scheme == "file":
        return
    bucket = urlsplit(root).netloc
    where = f" at {endpoint}" if (endpoint := _endpoint(root)) else ""

    def bucket_exists() -> bool:
        import pyarrow.fs

        fs, _ = filesystem(root)  # pyarrow raises OSError (refusals) or ValueError (a malformed URI)
        return fs.get_file_info(bucket).type != pyarrow.fs.FileType.NotFound

    timeout = check_timeout()
    answer = within(timeout, bucket_exists)
    if answer is NO_ANSWER:
        raise UsageError(f"--storage {root}: the storage endpoint{where} did not answer within {timeout:g} s "
                         f"(expected one that answers; {ENDPOINT_HINT})")
    if isinstance(answer, BaseException):
        raise UsageError(f"--storage {root}: {_storage_refusal(answer, bucket, where)}") from None
    if not answer:
        raise UsageError(f"--storage {root}: there is no bucket {bucket!r}{where} "
                         f"(expected an existing bucket: create it first, or name another)")


def _endpoint(root: str) -> str | None:
    """The endpoint an S3 client is pointed at by the environment (None: the provider's own)."""
    if urlsplit(root).scheme != "s3":
        return None
    return next((os.environ[name] for name in ENDPOINT_ENVS if os.environ.get(name)), None)


ENDPOINT_HINT = "AWS_ENDPOINT_URL names a non-AWS endpoint, docs/clusters.md"


CREDENTIAL_REFUSALS = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "InvalidAccessKeyId",
                       "SignatureDoesNotMatch", "AccessDenied")
"""How the AWS SDK (in pyarrow's words, then S3's) says that an endpoint refused the credentials it was given."""


def _storage_refusal(error: BaseException, bucket: str, where: str) -> str:
    """pyarrow's error, several lines of AWS SDK detail, said as one line that names what was expected."""
    text = " ".join(str(error).split())
    if any(word in text for word in CREDENTIAL_REFUSALS):
        return (f"the endpoint{where} refused these credentials for bucket {bucket!r} (expected "
                f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, that may read and write it)")
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "resolve" in text.lower():
        detail = text.rsplit("Details: ", 1)[-1] if "Details: " in text else text
        return f"no storage endpoint answered{where} ({detail}; expected one that answers: {ENDPOINT_HINT})"
    return f"the storage refused access to bucket {bucket!r}{where}: {text}"


def check_tracking_uri(uri: str) -> None:
    """The store at ``uri`` must be one MLflow can use: a tracking server that answers its health check,
    a SQLite file that is an MLflow store (or none yet, to be created), a file store only where
    ``MLFLOW_ALLOW_FILE_STORE`` lets MLflow open one, or another store that answers."""
    scheme = urlsplit(uri).scheme
    problem = file_store_problem(uri)
    if problem:
        raise UsageError(f"--tracking-uri {problem}")
    if scheme in ("http", "https"):
        _check_server(uri)
    elif sqlite_path(uri) is not None:
        _check_sqlite(uri)
    elif scheme not in ("", "file"):
        _check_other(uri)


def _check_server(uri: str) -> None:
    timeout = check_timeout()
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as response:
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise UsageError(
            f"--tracking-uri {uri}: no MLflow tracking server answered within {timeout:g} s ({reason})"
        ) from None


def _check_sqlite(uri: str) -> None:
    """Read-only: an existing file must hold MLflow's tables (its schema version), a new one is fine. One that
    another driver is creating is read once it is made (:func:`~results.reader.creation_lock`)."""
    path = sqlite_path(uri)
    if not path.exists():
        return
    try:
        with creation_lock(path), sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                                  timeout=check_timeout()) as db:
            tables = {name for (name,) in db.execute("select name from sqlite_master where type = 'table'")}
    except sqlite3.Error as error:
        raise UsageError(f"--tracking-uri {uri}: {path} is not a readable SQLite database ({error})") from None
    if tables and "alembic_version" not in tables:
        raise UsageError(f"--tracking-uri {uri}: {path} is a SQLite database but not an MLflow store")


def _check_other(uri: str) -> None:
    """Any other store (a database server, Databricks): one search, given the bound to answer in."""
    from mlflow import MlflowClient

    timeout = check_timeout()
    answer = within(timeout, lambda: MlflowClient(uri).search_experiments(max_results=1))
    if answer is NO_ANSWER:
        raise UsageError(f"--tracking-uri {uri}: the MLflow store did not answer within {timeout:g} s")
    if isinstance(answer, BaseException):  # whatever the store's driver raises is the reason to show
        raise UsageError(f"--tracking-uri {uri}: the MLflow store refused: {first_line(answer)}")
