"""An S3 endpoint on loopback for the storage tests: moto's server (``moto[server]``, the test extra), which
speaks S3's HTTP protocol, behind a small TCP relay that a test can take down and bring back.

Ray's and pyarrow's S3 filesystems, boto3 and MLflow all reach it through ``AWS_ENDPOINT_URL`` (the
endpoint override every AWS SDK reads), so the code under test runs unchanged: ``s3://BUCKET/...`` as on a
real cluster. The relay exists because moto keeps its buckets in memory: stopping the server would lose
them, while closing the relay's port is what an outage looks like to a client (connections refused) and
keeps every object for when it comes back.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")
            time.sleep(0.1)


def _pipe(source: socket.socket, sink: socket.socket, watch: Callable[[bytes], bool] | None = None) -> None:
    """Forward ``source`` to ``sink``; ``watch(chunk)`` (the client's side only) may stop the chunk and all
    that follows, by returning True. Either way, both sockets are shut down as it ends, which ends the other
    direction's ``_pipe`` too (its ``recv`` returns); closing them is left to ``Relay._forward``."""
    try:
        while chunk := source.recv(65536):
            if watch is not None and watch(chunk):
                return
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass
class Relay:
    """Forwards 127.0.0.1:``port`` to the server's port. ``down()`` closes the listening port and every open
    connection (a client is refused, as by a dead endpoint); ``up()`` listens again on the same port. A
    connection's sockets are closed as soon as either side ends it: the sweep's driver opens dozens of
    connections a second, and sockets kept until ``down()`` ran this process out of file descriptors."""

    target: int
    port: int = field(default_factory=free_port)
    _listener: socket.socket | None = None
    _open: set[socket.socket] = field(default_factory=set)
    """The sockets of the connections being forwarded (both ends of each), for ``down()`` to cut."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cut_on: bytes | None = None
    cut: threading.Event = field(default_factory=threading.Event)
    """Set when ``down_on``'s request came and the relay went down for it."""

    def down_on(self, request_part: bytes) -> None:
        """Go down (as ``down()``) the moment a client sends bytes holding ``request_part`` (a key's part of a
        request line, e.g. ``b"checkpoint_000001/training_state.pt"``), before they reach the server: an
        outage that starts exactly as that object is written. ``cut`` is set then."""
        self.cut.clear()
        self._cut_on = request_part

    def _watch(self, chunk: bytes) -> bool:
        if self._cut_on is None or self._cut_on not in chunk:
            return False
        self._cut_on = None
        self.down()
        self.cut.set()
        return True

    def up(self, timeout: float = 30.0) -> None:
        """Listen again on the same port. A connection the relay accepted just before ``down()`` (a client that
        kept retrying against it) can hold the port for a moment after it is closed: binding is tried again
        for up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind(("127.0.0.1", self.port))
                break
            except OSError:
                listener.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._open = self._open, set()
        if listener is not None:
            # shutdown first: a close() alone leaves the port listening while _accept's thread is blocked in
            # accept() on it (the kernel keeps the socket for the call), so the next client would be accepted.
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        # Shut down, not closed here: each connection's thread is still in recv() on its sockets. Shutting
        # them down ends the connection for the client at once and wakes those threads, and the connection's
        # _forward closes both sockets once neither thread uses them (closing under a thread blocked on the
        # descriptor could let it act on a new socket that reused the number).
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            threading.Thread(target=self._forward, args=(client, server), daemon=True).start()

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        """Forward one connection both ways until either side (or ``down()``) ends it, then close both sockets:
        a socket only shut down keeps its descriptor for as long as anything holds it."""
        back = threading.Thread(target=_pipe, args=(server, client), daemon=True)
        back.start()
        _pipe(client, server, self._watch)
        back.join()  # ends promptly: _pipe shut both sockets down as it returned
        with self._lock:
            self._open -= {client, server}
        client.close()
        server.close()


@dataclass
class S3Endpoint:
    """A running endpoint: its URL (through the relay), the variables a process needs to use it, and
    ``create_bucket``."""

    url: str
    relay: Relay

    @property
    def env(self) -> dict[str, str]:
        """What a subprocess (a driver, an MLflow server, a Ray node) needs to reach this endpoint."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.url, "MLFLOW_S3_ENDPOINT_URL": self.url}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, **_boto_credentials())

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` in ``bucket``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _boto_credentials() -> dict[str, str]:
    return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]}


@contextmanager
def s3_endpoint(set_environ: bool = True) -> Iterator[S3Endpoint]:
    """Start moto's server and its relay; with ``set_environ`` this process reaches it too (the variables are
    put back afterwards). Stopped on exit."""
    server_port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(server_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    relay = Relay(server_port)
    saved = {key: os.environ.get(key) for key in (*CREDENTIALS, "AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL")}
    try:
        wait_listening(server_port)
        relay.up()
        endpoint = S3Endpoint(f"http://127.0.0.1:{relay.port}", relay)
        if set_environ:
            os.environ.update(endpoint.env)
        yield endpoint
    finally:
        relay.down()
        server.terminate()
        server.wait(timeout=30)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
