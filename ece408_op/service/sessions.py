"""The pages' sessions: a team (or the instructor) logs in once with its token and the browser
keeps a session cookie instead; the token itself is never stored in the browser.

The cookie holds 256 random bits (``secrets.token_urlsafe(32)``); the database keeps only their
SHA-256, with the owner and the id of the token that opened the session. A session counts while
it has not expired (``LIFETIME``) and that token is not revoked: revoking or rotating a team's
token ends its sessions; logging out deletes the row; a team holds at most ``MAX_SESSIONS`` (a
new login ends its oldest). The cookie is HttpOnly (no script reads
it), SameSite=Strict (no other site's page sends it) and Secure where the request came over TLS
(directly, or through a proxy that ``serve --forwarded-allow-ips`` trusts).

Forms that change something carry a CSRF field derived from the cookie's secret (``csrf``),
checked beside SameSite (``check_csrf``): a page of another site can neither read nor guess it.
"""
import hashlib
import hmac
import re
import secrets

from . import clock
from .tokens import Principal

COOKIE = "ece408_session"
LIFETIME = 7 * 24 * 3600                 # seconds a session lasts (a week: a deadline's run-up)
MAX_SESSIONS = 32                        # a team's (or the instructor's) live sessions: the oldest end first
VALUE = re.compile(r"^[A-Za-z0-9_-]{43}$")


def digest(value):
    return hashlib.sha256(value.encode("ascii")).hexdigest()


def open_session(db, token_id, principal, now=None):
    """A new session for ``principal`` (opened with the token ``token_id``); returns the cookie's
    value. Expired sessions are deleted on the way."""
    now = clock.now() if now is None else now
    value = secrets.token_urlsafe(32)
    with db.transaction() as tx:
        tx.execute("DELETE FROM service_sessions WHERE expires_at < ?", (now,))
        tx.execute("INSERT INTO service_sessions (id, token_id, kind, name, created_at, expires_at) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (digest(value), token_id, principal.kind, principal.name, now,
                                                 now + LIFETIME))
        tx.execute("DELETE FROM service_sessions WHERE kind = ? AND name = ? AND id NOT IN (SELECT id FROM "
                   "service_sessions WHERE kind = ? AND name = ? ORDER BY created_at DESC, id LIMIT ?)",
                   (principal.kind, principal.name, principal.kind, principal.name, MAX_SESSIONS))
    return value


def find(db, value, now=None):
    """The Principal of the session whose cookie is ``value``, or None (no such session, expired,
    or its token revoked)."""
    if not value or not VALUE.match(value):
        return None
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        row = tx.one("SELECT s.kind, s.name FROM service_sessions s JOIN service_tokens t ON t.id = s.token_id "
                     "WHERE s.id = ? AND s.expires_at > ? AND t.revoked_at IS NULL", (digest(value), now))
    return Principal(row[0], row[1]) if row else None


def close(db, value):
    """Log out: the session's row is deleted (its cookie opens nothing any more)."""
    if value and VALUE.match(value):
        with db.transaction() as tx:
            tx.execute("DELETE FROM service_sessions WHERE id = ?", (digest(value),))


def csrf(value):
    """The CSRF field of the forms of the session whose cookie is ``value``."""
    return hmac.new(value.encode("ascii"), b"ece408 page form", hashlib.sha256).hexdigest()[:32]


def same_text(a, b):
    """Whether the texts ``a`` and ``b`` are equal, in time independent of where they differ (any
    characters: hmac.compare_digest takes ASCII text only)."""
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def check_csrf(value, given):
    return bool(value) and isinstance(given, str) and same_text(csrf(value), given)
