"""What every answer of a real server says in its headers and body, whatever the route: no
token's secret echoed (in an error body, a page or a log line), redirects relative (never to the
host a request's Host header names), HSTS where the request came over TLS (a trusted proxy's
X-Forwarded-Proto), and ``Cache-Control: no-store`` on answers that carry a secret."""
import secrets

import httpx
import pytest

from servicekit import Service

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    running = Service(tmp_path_factory.mktemp("headers"), workers=0,
                      args=["--forwarded-allow-ips", "127.0.0.1"]).start()
    yield running
    running.close()


def _token_like():
    return f"ece408_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def test_a_token_in_a_path_or_a_name_is_never_echoed(service):
    token = service.add_teams("echo")["echo"]
    leaked = _token_like()
    secret = leaked.split("_", 2)[2]
    answers = [
        httpx.get(f"{service.url}/api/jobs/{leaked}", headers={"Authorization": f"Bearer {token}"}),
        httpx.get(f"{service.url}/api/jobs/{token}", headers={"Authorization": f"Bearer {token}"}),
        service.admin("POST", "/api/admin/teams/revoke", json={"name": leaked}),
        service.admin("POST", "/api/admin/teams/rotate", json={"name": leaked}),
        httpx.get(f"{service.url}/jobs/{leaked}"),
        httpx.get(f"{service.url}/team/{leaked}"),
    ]
    for answer in answers:
        assert answer.status_code >= 300
        assert secret not in answer.text and token.split("_", 2)[2] not in answer.text, (answer.url, answer.text)
    log = service.log()
    assert secret not in log and token.split("_", 2)[2] not in log, "a secret reached the log"
    assert "[secret removed]" in log or "/api/jobs/" in log


def test_redirects_are_relative_whatever_the_host_header(service):
    for path in ("/team/", "/ranking/", "/admin/", "/login/"):
        answer = httpx.get(service.url + path, headers={"Host": "evil.example"}, follow_redirects=False)
        if 300 <= answer.status_code < 400:
            location = answer.headers["location"]
            assert location.startswith("/") and not location.startswith("//"), (path, location)
            assert "evil.example" not in location, (path, location)


def test_hsts_over_tls_only(service):
    plain = httpx.get(service.url + "/health")
    assert "strict-transport-security" not in plain.headers
    tls = httpx.get(service.url + "/health", headers={"X-Forwarded-Proto": "https"})
    assert tls.headers.get("strict-transport-security", "").startswith("max-age="), tls.headers
    refused = httpx.get(service.url + "/api/jobs", headers={"X-Forwarded-Proto": "https"})
    assert refused.status_code == 401 and "strict-transport-security" in refused.headers


def test_answers_carrying_a_secret_are_not_stored(service):
    made = service.admin("POST", "/api/admin/teams", json={"names": ["cached"]})
    assert made.status_code == 200 and made.json()["teams"][0]["token"]
    assert made.headers.get("cache-control") == "no-store", made.headers
    worker = service.admin("POST", "/api/admin/workers", json={"name": "cache-worker"})
    assert worker.status_code == 200 and worker.headers.get("cache-control") == "no-store"
    token = made.json()["teams"][0]["token"]
    jobs = httpx.get(service.url + "/api/jobs", headers={"Authorization": f"Bearer {token}"})
    assert jobs.headers.get("cache-control") == "no-store"
