"""Credentials out of URLs and messages before they are logged, reported or stored (pure)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["MASK", "redact_endpoint", "redact_text", "redact_url"]

#: what a redacted value reads as (SQLAlchemy's ``hide_password`` spelling)
MASK = "***"
# known secrets shorter than this are not searched for: masking them would mangle ordinary words
_MIN_SECRET = 4
# query parameter names that carry credentials: api_key, apikey, access_token, X-Amz-Signature, ...
_SECRET_PARAM = re.compile(
    r"(?:^|[_.-])(?:api[_-]?key|apikey|key|token|secret|password|passwd|pwd|sig|signature|credential|auth)$",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")
# a header echoed back: `Authorization: Bearer x`, `"x-api-key": "x"` (an auth scheme and its value)
_HEADER = re.compile(
    r"\b((?:proxy-)?authorization|x-api-key|api-key)([\"']?\s*[:=]\s*[\"']?)(?:[A-Za-z]+\s+)?[^\s\"',;}]+",
    re.IGNORECASE,
)
# the userinfo password of a URL urlsplit refuses (a broken IPv6 host)
_PASSWORD = re.compile(r"(://[^/@:\s]*:)[^/@\s]*@")
# `api_key=x`, `"token": "x"`, `password: x` in free text
_ASSIGNED = re.compile(
    r"\b([\w-]*(?:api[_-]?key|apikey|token|secret|password|passwd))([\"']?\s*[:=]\s*[\"']?)"
    r"(?!\*\*\*)[^\s\"'&,;}]+",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer)\s+[\w.~+/-]*[\w~+/-]=*", re.IGNORECASE)
_BASIC = re.compile(r"\b(Basic)\s+([A-Za-z0-9+/]{4,}=*)", re.IGNORECASE)
# common token shapes: OpenAI/Anthropic sk-..., GitHub, Slack, Hugging Face, AWS access keys, JWTs
_TOKEN = re.compile(
    r"\b(?:sk-[\w-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[\w-]{10,}|hf_[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,})"
)


def _secret_param(name: str) -> bool:
    return bool(_SECRET_PARAM.search(unquote(name)))


def redact_url(url: str) -> str:
    """Return *url* with its userinfo password and secret-looking query values replaced by ``***``.

    ``postgresql://app:pw@db/x`` becomes ``postgresql://app:***@db/x`` and
    ``https://h/v1?api_key=k&page=2`` becomes ``https://h/v1?api_key=***&page=2``; the rest is
    kept byte for byte. A user name alone (``postgresql://app@db``) is not a secret.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _PASSWORD.sub(rf"\1{MASK}@", url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            pairs.append(f"{name}={MASK}" if eq and value and _secret_param(name) else pair)
        query = "&".join(pairs)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_endpoint(url: str) -> str:
    """Return *url* as ``scheme://host[:port]/***``: the address of an endpoint whose path may be its
    secret (a Slack-style webhook, ``https://hooks.slack.com/services/T000/B000/XXXX``), shown only
    as far as its host. A URL with no path beyond ``/`` and no query keeps them (as
    :func:`redact_url` shows it)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    if parts.path in ("", "/") and not parts.query:
        return redact_url(url)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, "/" + MASK, "", ""))


def _basic(match: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return match.group(0)
    # Basic credentials are base64("user:password"); other words after "Basic" are left alone
    return f"{match.group(1)} {MASK}" if b":" in decoded else match.group(0)


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Return *text* with credentials replaced by ``***``.

    Masks the given *secrets* (as written and percent-encoded), passwords and secret query
    values of URLs in the text, echoed ``Authorization`` / API-key headers, ``Bearer`` and
    ``Basic`` credentials, ``api_key=...``-style assignments and common token shapes
    (``sk-...``, ``ghp_...``, ``xoxb-...``, ``hf_...``, ``AKIA...``, JWTs).
    """
    known: set[str] = set()
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET:
            known.update((secret, quote(secret, safe="")))
    # longest first, so a secret that contains another is masked whole
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _HEADER.sub(rf"\1\2{MASK}", text)
    text = _BEARER.sub(rf"\1 {MASK}", text)
    text = _BASIC.sub(_basic, text)
    text = _ASSIGNED.sub(rf"\1\2{MASK}", text)
    return _TOKEN.sub(MASK, text)
