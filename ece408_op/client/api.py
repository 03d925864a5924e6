"""The team's client: what ``submit --server``, ``jobs`` (``jobs download``: a development run's
build folder), ``ranking --server`` and ``login`` do over HTTP, and the connection the instructor's
client (instructor_client.py) uses too. It needs httpx and nothing of the GPU: no MXNet, no
PyCUDA, no nvcc, no sandbox, no NumPy, no FastAPI (the base install, ``pip install ece408_op``, is
enough on a laptop of any system).

Where the token comes from, first found: ``$ECE408_TOKEN``; the file ``--token-file`` or
``$ECE408_TOKEN_FILE`` names; for the instructor's commands on the server's own machine, the
instructor's token file ``serve`` made; the file ``login`` wrote (mode 600), used only for the
server it was written for. A token is sent in the Authorization header only, and never over plain HTTP to
another machine (the loopback address excepted): https:// for anything else (docs/service.md:
the service behind a TLS reverse proxy).

Exit status of a followed job: 0 when it ran and is valid (ranked: counts for the ranking;
development: every command succeeded); 1 when it ran but is not valid, failed, was cancelled
or stopped; 2 when it was refused (usage, token, rules, an unreachable service). Ctrl-C while
following detaches: the job goes on, and the line printed says how to follow it again.
"""
import hashlib
import ipaddress
import json
import os
import secrets
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from ..base.files import user_folder
from ..base.names import printable, shown
from ..base.terms import TeamError, looks_like_token
from ..errors import Ece408Error
from ..service import upload as uploads
from .statusline import StatusLine, elapsed_text

SERVER_ENV = "ECE408_SERVER"
TOKEN_ENV = "ECE408_TOKEN"
TOKEN_FILE_ENV = "ECE408_TOKEN_FILE"
PATIENCE = 600.0                   # seconds a follow waits for a service that went away
SUBMIT_PATIENCE = 60.0             # seconds a request is retried while the service answers 503
SUBMIT_SLOW_PATIENCE = 600.0       # seconds a submission waits for a slow service (sent again under its key)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)   # POSIX's; Windows has none (and no links a team makes there)


def login_file():
    """Where ``login`` keeps the server and token (mode 600): the user's config folder."""
    return user_folder("config", "login.json")


class ClientError(Ece408Error):
    """Refused, or the service cannot be reached: one line, exit 2."""

    exit_code = 2


class Refusal(ClientError):
    """The service answered, and refused (HTTP ``status``, 4xx or 5xx): what was asked was not done
    (where the service works in transactions: nothing of it)."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def normal_url(url):
    return url.strip().rstrip("/")


def check_url(url):
    """``url``, normalised; ClientError where it is not http(s), or http to another machine."""
    url = normal_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientError(f"the service's address is http(s)://HOST[:PORT], not {printable(url, 80)}")
    if parts.scheme == "http" and not loopback(parts.hostname):
        raise ClientError(f"refusing to send a token to {printable(url, 80)} over plain HTTP: it would cross the "
                          "network readable by anyone on the way; use https:// (the service behind a TLS proxy)")
    return url


def loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token_file(path):
    try:
        text = Path(path).read_text(encoding="utf-8-sig").strip()      # a BOM from a Windows editor
    except OSError as exc:
        raise ClientError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if not looks_like_token(text):
        raise ClientError(f"the token file {path} does not hold a token of this service")
    return text


def saved_login():
    path = login_file()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "server" in data and "token" in data else None


def resolve_server(explicit=None):
    """The service's URL: ``--server``, else $ECE408_SERVER, else the one ``login`` saved."""
    url = explicit or os.environ.get(SERVER_ENV) or (saved_login() or {}).get("server")
    if not url:
        raise ClientError(f"which service? give --server URL (or set ${SERVER_ENV}, or log in once: "
                          "python -m ece408_op login --server URL)")
    return check_url(url)


def resolve_token(url, token_file=None, preferred_files=()):
    if os.environ.get(TOKEN_ENV):
        token = os.environ[TOKEN_ENV].strip()
        if not looks_like_token(token):
            raise ClientError(f"${TOKEN_ENV} does not hold a token of this service")
        return token
    path = token_file or os.environ.get(TOKEN_FILE_ENV)
    if path:
        return read_token_file(path)
    for candidate in preferred_files:
        if os.access(candidate, os.R_OK):
            return read_token_file(candidate)
    login = saved_login()
    if login and normal_url(login["server"]) == url and looks_like_token(str(login["token"])):
        return str(login["token"])
    raise ClientError(f"no token for {url}: python -m ece408_op login --server {url} (or set ${TOKEN_ENV})")


def error_line(response):
    try:
        data = response.json()
        if isinstance(data, dict) and data.get("error"):
            return str(data["error"])
    except ValueError:
        pass
    return f"HTTP {response.status_code} from the service"


class Client:
    """HTTP to the service with one token; errors as ClientError lines."""

    def __init__(self, url, token, out=None, err=None):
        import httpx
        self.httpx = httpx
        self.url = url
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(60.0, connect=15.0))
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def note(self, text):
        self.err.write(text + "\n")
        self.err.flush()

    def request(self, method, path, patience=SUBMIT_PATIENCE, again=False, **kwargs):
        """The response of a 2xx; ClientError otherwise. 503 (the service's database away) is
        retried for ``patience`` seconds, as its Retry-After says. ``again``: the request may be
        sent again safely (a submission under its idempotency key): a service that is slow to
        answer (no answer in time, a dropped connection, 502/504) is waited for too, saying so."""
        deadline = time.monotonic() + patience
        said, reached = False, False
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except self.httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                first_connect = not reached and isinstance(exc, (self.httpx.ConnectError, self.httpx.ConnectTimeout))
                if not again or first_connect or time.monotonic() + 5 > deadline:
                    if again and reached:
                        raise ClientError(f"the service at {self.url} did not answer in {patience / 60:g} min "
                                          f"({why}); the submission may be queued: 'python -m ece408_op jobs list' "
                                          "shows it") from None
                    raise ClientError(f"cannot reach the service at {self.url} ({why}); check --server / "
                                      f"${SERVER_ENV}") from None
                reached = True
                if not said:
                    self.note(f"* The service is slow to answer ({why}); sending the same submission again under "
                              f"its key (it is queued once however often it is sent), for up to {patience / 60:g} min")
                    said = True
                time.sleep(5)
                continue
            reached = True
            if response.status_code == 503 or (again and response.status_code in (502, 504)):
                wait = retry_after(response)
                if time.monotonic() + wait < deadline:
                    if not said:
                        self.note(f"* The service is unavailable ({error_line(response)}); retrying")
                        said = True
                    time.sleep(wait)
                    continue
            if response.status_code >= 400:
                raise Refusal(error_line(response), response.status_code)
            return response

    # ------------------------------------------------------------ following a job
    def follow(self, job_id, after=-1, patience=PATIENCE):
        """Print the job's transcript as it comes (queue places, the elapsed time and the step on
        stderr: ``statusline.py``) until it ends; returns the ended job. Reconnects (from the last
        chunk) when the connection drops."""
        status = StatusLine(self.out, self.err)
        try:
            job = self._follow(job_id, after, patience, status)
        finally:
            status.close()
        self.note(end_line(job))
        return job

    def _follow(self, job_id, after, patience, status):
        cursor, shown, lost_since = after, None, None
        note = status.note
        while True:
            try:
                with self.http.stream("GET", f"/api/jobs/{job_id}/events", params={"after": cursor},
                                      headers={"Accept": "text/event-stream"},
                                      timeout=self.httpx.Timeout(10.0, read=60.0)) as response:
                    if response.status_code >= 400 and response.status_code != 503:
                        response.read()
                        raise ClientError(error_line(response))
                    if response.status_code == 503:
                        raise self.httpx.TransportError("the service answered 503")
                    if lost_since is not None:
                        note("* Connected again")
                        lost_since = None
                    for event, data, event_id in sse_events(response.iter_lines()):
                        if event == "line":
                            status.transcript(json.loads(data))
                            cursor = int(event_id)
                        elif event == "progress":
                            status.progress(json.loads(data))
                        elif event == "queued":
                            place = json.loads(data)
                            if place != shown:
                                note(place_line(place))
                                shown = place
                        elif event == "notice":
                            note(f"* {json.loads(data)}")
                        elif event == "end":
                            return json.loads(data)
            except self.httpx.TransportError as exc:
                if lost_since is None:
                    lost_since = time.monotonic()
                    note(f"* Lost the connection to the service ({type(exc).__name__}); reconnecting")
                elif time.monotonic() - lost_since > patience:
                    raise ClientError(f"the service did not answer for {patience:g} s; the job may still run: "
                                      f"python -m ece408_op jobs show {job_id} --follow") from None
                time.sleep(2.0)

    def job(self, job_id):
        return self.request("GET", f"/api/jobs/{job_id}").json()


def retry_after(response, default=5.0):
    try:
        return max(1.0, min(60.0, float(response.headers.get("retry-after", default))))
    except ValueError:
        return default


def sse_events(lines):
    """(event, data, id) of each server-sent event in ``lines``; comments (pings) skipped."""
    event, data, event_id = "message", [], None
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data), event_id
            event, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            event_id = value


def place_line(place):
    ahead = place.get("place")
    where = "next in line" if ahead == 0 else f"{ahead} job(s) ahead of yours" if ahead is not None else "queued"
    line = f"* Waiting in the queue: {where} ({place.get('waiting')} waiting, {place.get('running')} running)"
    return line + (f"; {place['note']}" if place.get("note") else "")


def end_line(job):
    """The follower's last line (the ``end`` event's job): when the job ended, how, after how
    long, and where its build folder is (the record's summary is the transcript's last line)."""
    finished, started = job.get("finished_at"), job.get("started_at")
    timed = isinstance(finished, (int, float)) and not isinstance(finished, bool)
    ended = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(finished)) if timed else "now"
    how = str(job.get("state", "ended")) + (f", {job['status']}" if job.get("status") else "")
    line = f"* Ended {ended}: {how}"
    if timed and isinstance(started, (int, float)) and not isinstance(started, bool):
        line += f" (elapsed {elapsed_text(finished - started)})"
    build = job.get("build")
    if build:
        line += f"; build folder: python -m ece408_op jobs download {job['id']}"
    return line


def exit_status(job):
    """0 valid, 1 ran but not valid / failed / cancelled."""
    if job.get("state") != "done":
        return 1
    if job.get("kind") == "ranked":
        return 0 if job.get("valid") else 1
    return 0 if job.get("status") == "ok" else 1


def detach_line(job_id):
    return (f"\n* Detached: job {job_id} goes on without you. Follow it again with: "
            f"python -m ece408_op jobs show {job_id} --follow")


def follow_to_end(client, job_id, after=-1):
    """Follow ``job_id`` to its end; its exit status (130 after Ctrl-C, which detaches)."""
    try:
        job = client.follow(job_id, after)
    except KeyboardInterrupt:
        client.note(detach_line(job_id))
        return 130
    if job.get("state") == "failed" and job.get("reason"):
        client.note(f"* The job failed: {job['reason']}")
    return exit_status(job)


# ---------------------------------------------------------------------------- commands

def connect(server=None, token_file=None, preferred_files=()):
    url = resolve_server(server)
    return Client(url, resolve_token(url, token_file, preferred_files))


def submit(client, folder, milestone=None, size=None, detach=False, gpu=None):
    """Upload what the run uses from ``folder``, queue it (``gpu``: on that device kind), follow
    it; the exit status."""
    if milestone is not None:
        try:
            data, taken = uploads.pack_ranked(folder, milestone)
        except (TeamError, uploads.IgnoreError) as exc:
            raise ClientError(str(exc)) from None
        what = f"ranked {milestone} on {size} images: " + ", ".join(f"{f.name} ({f.size} bytes)" for f in taken)
        params = {"kind": "ranked", "milestone": milestone, "size": size}
    else:
        try:
            packed = uploads.pack_folder(folder)
        except (uploads.UploadError, uploads.IgnoreError, TeamError) as exc:
            raise ClientError(str(exc)) from None
        for line in packed.notes:
            client.note(line)
        data = packed.data
        what = (f"development run: {len(packed.files)} file(s), {sum(len(e.data) for e in packed.files)} bytes; "
                f"{packed.left_out.line()}" + (" (submit --dry-run lists them)" if packed.left_out.items else ""))
        params = {"kind": "development"}
    if gpu is not None:
        params["gpu"] = gpu
        what += f"; on {printable(gpu, 80)}"
    client.note(f"* Uploading to {client.url}: {what}")
    key = secrets.token_hex(16)                        # one submission: sent again under the same key, queued once
    answer = client.request("POST", "/api/jobs", patience=SUBMIT_SLOW_PATIENCE, again=True, params=params,
                            content=data, headers={"Content-Type": "application/gzip", "Idempotency-Key": key})
    job = answer.json()
    again = " (an earlier try of this submission had reached it)" if answer.status_code == 200 else ""
    client.note(f"* Job {job['id']} accepted (team {job['team']}){again}")
    if job.get("warning"):
        client.note(f"* Warning: {job['warning']}")
    if detach:
        client.note(f"* Follow it with: python -m ece408_op jobs show {job['id']} --follow")
        return 0
    return follow_to_end(client, job["id"])


def dry_run(folder, milestone=None, out=None):
    """``submit --dry-run``: list what ``submit`` would send from ``folder`` (each file and its size,
    what is left out and why, the counts) on ``out``; sends nothing, needs no service or token."""
    try:
        lines = uploads.preview(folder, milestone)
    except (uploads.UploadError, uploads.IgnoreError, TeamError) as exc:
        raise ClientError(str(exc)) from None
    out = out or sys.stdout
    out.write("".join(line + "\n" for line in lines))
    out.flush()
    return 0


def show(client, job_id, follow=False):
    if follow:
        return follow_to_end(client, job_id)
    job = client.job(job_id)
    client.out.write(client.request("GET", f"/api/jobs/{job_id}/transcript").text)
    client.out.flush()
    line = f"* Job {job_id}: {job['state']}" + (f", {job['status']}" if job.get("status") else "")
    if job.get("state") == "queued" and job.get("place") is not None:
        line += f"; {place_line(job)[2:]}"
    progress = job.get("progress")
    if job.get("state") == "running" and progress and progress.get("started_at") is not None:
        line += f", elapsed {elapsed_text(float(progress['now']) - float(progress['started_at']))}"
        if progress.get("step"):
            line += f"; step: {shown(progress['step'], 200)}"
    client.note(line)
    return exit_status(job) if job["state"] in ("done", "failed", "cancelled") else 0


def listing(client, team=None, limit=50):
    params = {"limit": limit}
    if team:
        params["team"] = team
    found = client.request("GET", "/api/jobs", params=params).json()["jobs"]
    if not found:
        client.out.write("No jobs yet.\n")
        return 0
    rows = [["job", "team", "what", "state", "status", "submitted (UTC)"]]
    for job in found:
        what = f"{job['milestone']} {job['size']}" if job["kind"] == "ranked" else "development"
        status = (job.get("status") or "-") + (" (valid)" if job.get("valid") else "")
        rows.append([job["id"], shown(job["team"], 40), what, job["state"], status,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job["submitted_at"]))])
    client.out.write(table(rows))
    return 0


def table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def cancel(client, job_id):
    job = client.request("POST", f"/api/jobs/{job_id}/cancel").json()
    if job["state"] == "cancelled":
        client.out.write(f"Job {job_id} cancelled before it started.\n")
    else:
        client.out.write(f"Job {job_id} is running; its worker stops it now.\n")
    return 0


def download(client, job_id, out=None):
    """``jobs download``: fetch the job's build folder, check it (its length and SHA-256 as the
    service sent them, then the archive check with the build folder's bounds) and unpack it into
    ``out`` (default ``build-<id>``), which must not exist or be an empty folder: all of it is
    written, or nothing."""
    from ..service import buildfolder
    dest = Path(out or f"build-{job_id}")
    exists = f"{printable(str(dest))} exists and is not an empty folder; give another with -o DIR"
    if dest.is_symlink() or dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ClientError(exists)
    data, sha256 = fetch_build(client, job_id)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ClientError(f"the build folder of job {job_id} did not arrive as the service sent it (its SHA-256 "
                          "differs); run the command again")
    try:
        checked = buildfolder.check(data)
    except uploads.UploadError as exc:
        raise ClientError(f"job {job_id}: {exc}") from None
    try:
        buildfolder.unpack_into(checked, dest)
    except FileExistsError:
        raise ClientError(exists) from None
    except OSError as exc:
        raise ClientError(f"cannot write the build folder into {printable(str(dest))}: {exc.strerror or exc}") from None
    files = sum(1 for e in checked.entries if e.data is not None)
    client.out.write(f"Job {job_id}'s build folder: {files} files, {buildfolder.mib(checked.total)}, in {dest}\n")
    return 0


def fetch_build(client, job_id):
    """(the archive's bytes, its SHA-256 as the service gave it); ClientError where the service
    refuses or the download is cut short."""
    from ..service.buildfolder import sent_cap
    got = 0
    try:
        with client.http.stream("GET", f"/api/jobs/{job_id}/build",
                                timeout=client.httpx.Timeout(60.0, connect=15.0)) as response:
            if response.status_code >= 400:
                response.read()
                raise ClientError(error_line(response))
            length = int(response.headers.get("content-length", "-1"))
            sha256 = response.headers.get("x-build-sha256", "")
            if not 0 <= length <= sent_cap():
                raise ClientError(f"the service sent a build folder of {length} bytes; at most {sent_cap()} are taken")
            parts = []
            for chunk in response.iter_raw():
                got += len(chunk)
                if got > length:
                    break
                parts.append(chunk)
    except client.httpx.TransportError as exc:
        raise ClientError(f"the download of job {job_id}'s build folder was cut short after {got} bytes "
                          f"({type(exc).__name__}); run the command again") from None
    if got != length:
        raise ClientError(f"the download of job {job_id}'s build folder was cut short ({got} of {length} bytes); "
                          "run the command again")
    return b"".join(parts), sha256


def ranking(client, milestone=None, size=None, fmt="table", device=None):
    params = {"format": fmt}
    if milestone:
        params["milestone"] = milestone
    if size:
        params["size"] = size
    if device:
        params["device"] = device
    client.out.write(client.request("GET", "/api/ranking", params=params).text)
    return 0


def login(url, token):
    """Check ``token`` with the service and keep it (mode 600) for ``url``; returns whoami."""
    client = Client(url, token)
    who = client.request("GET", "/api/whoami").json()
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"server": url, "token": token}, f)
    os.replace(tmp, path)
    return who, path


__all__ = ["Client", "ClientError", "Refusal", "connect", "submit", "dry_run", "show", "listing", "cancel", "download", "ranking",
           "login", "resolve_server", "resolve_token", "check_url", "read_token_file", "loopback", "table"]
