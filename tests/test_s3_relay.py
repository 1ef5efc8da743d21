"""The relay in front of the test endpoint (:class:`tests.s3_endpoint.Relay`): it forwards, it refuses the moment
it is down, it listens again on its port, and it keeps no socket of a connection that ended."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tests.s3_endpoint import Relay


@pytest.fixture
def echo_port():
    """A TCP server on loopback that sends back what it reads, a connection at a time."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                while data := connection.recv(1024):
                    connection.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.shutdown(socket.SHUT_RDWR)
    server.close()


def echoed(port: int, message: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(message)
        return connection.recv(1024)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_relay_refuses_the_moment_it_is_down_and_listens_again_on_its_port(echo_port):
    relay = Relay(echo_port)
    relay.up()
    try:
        assert echoed(relay.port, b"up") == b"up"
        relay.down()
        with pytest.raises(ConnectionRefusedError):  # the first client after down(), not only later ones
            socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        relay.up(timeout=1.0)  # the port is free at once
        assert echoed(relay.port, b"again") == b"again"
    finally:
        relay.down()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_relay_closes_the_sockets_of_every_connection_that_ended(echo_port):
    """A driver opens dozens of connections a second through it: sockets kept until down() once took a test
    past the process's limit of open files."""
    relay = Relay(echo_port)
    relay.up()
    try:
        echoed(relay.port, b"warm")
        before = open_descriptors()
        for number in range(200):
            assert echoed(relay.port, b"%d" % number) == b"%d" % number
        for _ in range(50):  # the relay's threads close a connection's two sockets just after it ends
            if open_descriptors() <= before + 4:
                break
            time.sleep(0.1)
        assert open_descriptors() <= before + 4  # 200 connections through it: 400 sockets if it kept them
    finally:
        relay.down()
