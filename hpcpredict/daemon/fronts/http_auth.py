"""Who may read per-user data from the admin API: a bearer token kept in a file.

The per-user endpoints show every user's jobs, runtimes and errors, so they answer only a client
that sends ``Authorization: Bearer <token>``, the token being the content of the file named by
``http_token_file``. The file is the secret's only copy on the machine: readable by the daemon's
user and, with mode 0640, an admin group; a file every local user could read would make the
token worthless, so the daemon refuses to start with one. Comparison is constant-time
(`hmac.compare_digest`): the time to refuse a guess must not say how much of it was right.

Without a token file the per-user endpoints are off (403, saying how to turn them on) and the
API may only listen on a loopback address; ``/health`` and ``/metrics`` stay open either way
(the metrics are site-wide totals, nobody's jobs).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import stat
from pathlib import Path

# Shorter than this is guessable over a network; `openssl rand -hex 32` gives 64 characters.
MIN_TOKEN_CHARS = 16
HOW_TO_MAKE_A_TOKEN = (
    "(umask 027; openssl rand -hex 32 > /etc/hpcpredict/http-token); "
    "chgrp ADMIN_GROUP /etc/hpcpredict/http-token"
)


class TokenFileError(ValueError):
    """The token file cannot be used; the message says what to change."""


def is_loopback(host: str) -> bool:
    """True for "localhost" and the loopback addresses (127.0.0.0/8, ::1).

    Any other name counts as non-loopback, even one that resolves to 127.0.0.1 today: what
    the name resolves to can change under the daemon, the refusal must not.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_token(path: str | os.PathLike[str]) -> bytes:
    """The token in `path`, after checking the file keeps it secret.

    Refused: a file other users may read, write or execute (any "other" permission bit), one
    that is not a regular file, an empty or short token, or one with characters an HTTP header
    cannot carry. Surrounding whitespace (a final newline) is ignored.
    """
    path = Path(path)
    try:
        info = path.stat()
    except OSError as error:
        raise TokenFileError(f"http_token_file {path}: cannot read it ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"http_token_file {path}: not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o007:
        raise TokenFileError(
            f"http_token_file {path}: mode {mode:04o} lets every user on this machine read or "
            f"change the token; chmod o-rwx {path} (0600, or 0640 for an admin group)"
        )
    try:
        token = path.read_bytes().strip()
    except OSError as error:
        raise TokenFileError(f"http_token_file {path}: cannot read it ({error.strerror})") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(
            f"http_token_file {path}: the token has {len(token)} characters, at least "
            f"{MIN_TOKEN_CHARS} are needed; make one: {HOW_TO_MAKE_A_TOKEN}"
        )
    if not all(0x21 <= byte <= 0x7E for byte in token):
        raise TokenFileError(
            f"http_token_file {path}: the token must be printable ASCII without spaces (it travels "
            f"in an HTTP header); make one: {HOW_TO_MAKE_A_TOKEN}"
        )
    return token


def require_token_off_loopback(host: str, token_file: str) -> None:
    """Refuse to listen beyond this machine without a token: anyone on the network could
    otherwise reach the API (the per-user endpoints would be off, but not the open ones, and a
    later token would be the only line of defence anyway)."""
    if not token_file and not is_loopback(host):
        raise TokenFileError(
            f"http: {host or 'every address'} is not a loopback address, and no http_token_file is "
            "set; set one (serve --http-token-file) so that per-user data needs a token, or listen "
            "on 127.0.0.1"
        )


class BearerAuth:
    """Checks ``Authorization`` headers against the configured token: ``Bearer <token>``, or, for
    the page a browser opens (``GET /report``), ``Basic`` with the token as the password (any user
    name): a browser asks for that itself, and cannot be made to send a bearer token."""

    def __init__(self, token: bytes | None) -> None:
        """`token`: None when no token file is configured (per-user endpoints off)."""
        self.token = token

    @property
    def configured(self) -> bool:
        return self.token is not None

    def allows(self, authorization: str | None, *, basic: bool = False) -> bool:
        """True when the header carries the token (scheme case-insensitive, RFC 7235); with
        `basic`, also as the password of Basic credentials (RFC 7617)."""
        if self.token is None or not authorization:
            return False
        scheme, _, given = authorization.partition(" ")
        # Header values arrive decoded; surrogateescape gives back their bytes, whatever they are.
        given_bytes = given.strip().encode("utf-8", "surrogateescape")
        if scheme.lower() == "basic" and basic:
            try:
                given_bytes = base64.b64decode(given_bytes, validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given_bytes, self.token)
