"""Credentials never survive redact_url / redact_text; everything else is kept as it was."""

from __future__ import annotations

import base64

import pytest

from recrawler.redact import MASK, redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://app:s3cret@db.internal:5432/kb", "postgresql://app:***@db.internal:5432/kb"),
        ("http://user:secretpass@127.0.0.1:8080/v1", "http://user:***@127.0.0.1:8080/v1"),
        ("https://u:p%40ss@host/v1", "https://u:***@host/v1"),
        ("https://host/v1?api_key=abc&page=2", "https://host/v1?api_key=***&page=2"),
        (
            "https://host/x?access_token=t&token=t2&Password=p",
            "https://host/x?access_token=***&token=***&Password=***",
        ),
        ("https://s3/o?X-Amz-Signature=ab12&sig=cd&x=1", "https://s3/o?X-Amz-Signature=***&sig=***&x=1"),
        ("https://host/x?key=k&secret=s#frag", "https://host/x?key=***&secret=***#frag"),
    ],
)
def test_redact_url_masks_passwords_and_secret_parameters(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///recrawler.db",
        "sqlite:////var/lib/recrawler/state.db",
        "state.db",
        "postgresql://app@db/kb",
        "https://docs.example.com/guide/?page=2&utm_source=x",
        "https://host/x?key=",
    ],
)
def test_redact_url_keeps_urls_without_secrets_byte_for_byte(url: str) -> None:
    assert redact_url(url) == url


def test_redact_url_survives_a_url_urlsplit_refuses() -> None:
    assert redact_url("http://u:pw@[::1/x") == "http://u:***@[::1/x"


def test_redact_text_masks_known_secrets_as_written_and_percent_encoded() -> None:
    text = "key hunter2-xyz refused; retry with hunter2%2Fabc or hunter2/abc"
    assert redact_text(text, ["hunter2-xyz", "hunter2/abc", None, ""]) == (
        "key *** refused; retry with *** or ***"
    )


def test_redact_text_ignores_tiny_secrets() -> None:
    # masking "a" would mangle every word; such a secret is not one worth the damage
    assert redact_text("a cat", ["a"]) == "a cat"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Incorrect API key provided: sk-proj-AbCdEf0123456789.", "Incorrect API key provided: ***."),
        ("sent Bearer abc.def-ghi/jkl= and more", "sent Bearer *** and more"),
        ("Authorization: Bearer xyz123, retry", "Authorization: ***, retry"),
        ('{"headers": {"authorization": "Token abc"}}', '{"headers": {"authorization": "***"}}'),
        ("x-api-key: abc123 was refused", "x-api-key: *** was refused"),
        ("bad api_key=abc123&x=1", "bad api_key=***&x=1"),
        ('{"password": "pw1", "client_secret": "cs"}', '{"password": "***", "client_secret": "***"}'),
        ("POST http://u:pw@h/v1/embeddings failed", "POST http://u:***@h/v1/embeddings failed"),
        ("see https://h/x?token=abc for details", "see https://h/x?token=*** for details"),
        ("github ghp_" + "a" * 36 + " slack xoxb-1234567890-abc", "github *** slack ***"),
        ("aws AKIAABCDEFGHIJKLMNOP here", "aws *** here"),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "jwt ***"),
    ],
)
def test_redact_text_masks_credentials_in_messages(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_redact_text_masks_basic_credentials_only() -> None:
    basic = base64.b64encode(b"user:secretpass").decode()
    assert redact_text(f"got Basic {basic} from you") == "got Basic *** from you"
    # "Basic" followed by a word that is not base64("user:password") is prose
    assert redact_text("Basic authentication required") == "Basic authentication required"


@pytest.mark.parametrize(
    "text",
    [
        "429 Too Many Requests from https://api.openai.com/v1/embeddings: rate limited",
        "max_tokens=100 exceeded for task-management docs",
        "the sk-learn API",
    ],
)
def test_redact_text_leaves_ordinary_messages_alone(text: str) -> None:
    assert redact_text(text) == text


def test_redaction_is_idempotent() -> None:
    text = "Authorization: Bearer sk-abcdefghijkl api_key=x http://u:p@h/?token=t"
    once = redact_text(text, ["p"])
    assert redact_text(once) == once
    assert MASK in once
