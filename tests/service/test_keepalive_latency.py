"""A kept-alive connection answers at once: every accepted socket has TCP_NODELAY, so the second
request of a connection does not wait for the client's delayed ACK (about 40 ms a request
without it), and the team's client keeps its connection from one call to the next."""
import socket
import statistics
import time

import httpx
import pytest

from servicekit import Service

pytestmark = [pytest.mark.service, pytest.mark.serial]    # a request under 5 ms: alone (make test's serial phase)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    running = Service(tmp_path_factory.mktemp("latency"), workers=0).start()
    yield running
    running.close()


def _median_ms(call, n=40):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@pytest.mark.parametrize("path", ["/health", "/api/jobs"])
def test_a_kept_alive_request_answers_in_under_5_ms(service, path):
    token = service.add_teams(f"kept{path.count('/')}")[f"kept{path.count('/')}"]
    with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get(path).status_code == 200                      # the connection, opened once
        median = _median_ms(lambda: client.get(path).raise_for_status())
    assert median < 5, f"{path}: {median:.1f} ms a request on a kept-alive connection"


def test_the_server_sets_no_delay_on_what_it_accepts(service):
    # the second of two pipelined writes on one connection: with Nagle's rule the server's second
    # answer waits for the ACK of the first; read both and time them on a raw socket
    with socket.create_connection(("127.0.0.1", service.port)) as sock:
        request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request)
        _read_answer(sock)
        times = []
        for _ in range(10):
            start = time.perf_counter()
            sock.sendall(request)
            _read_answer(sock)
            times.append((time.perf_counter() - start) * 1000)
    assert statistics.median(times) < 5, times


def _read_answer(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def test_the_teams_client_keeps_its_connection(service):
    # the client's Client is one httpx.Client: ten calls, one connection (the server sees one peer port)
    from ece408_op.client.api import Client
    token = service.add_teams("keeper")["keeper"]
    client = Client(service.url, token)
    ports = set()
    for _ in range(10):
        response = client.request("GET", "/api/jobs")
        assert response.status_code == 200
        stream = response.extensions.get("network_stream")
        if stream is not None:
            ports.add(stream.get_extra_info("client_addr")[1])
    assert len(ports) == 1, ports
