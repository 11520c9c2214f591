"""Any ``/v1/embeddings`` server as the embedder (``openai:MODEL``): OpenAI, Ollama, vLLM, ...,
batched, with bounded retries that honour ``Retry-After``."""

from __future__ import annotations

import base64
import http.client
import json
import math
import random
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedding import PROBE_TEXT, SPEC_SETTING, EmbedderError, blank_mask, normalise, one_line
from recrawler.redact import redact_text, redact_url

# numpy is imported where vectors are made: a run that embeds nothing (an unchanged week) does
# not pay for loading it
if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

__all__ = ["OpenAIEmbedder"]

_KEY_HINT = "set RECRAWLER_EMBEDDER_API_KEY or OPENAI_API_KEY"
_MAX_WAIT_SECS = 30.0
_RETRY_STATUSES = frozenset({408, 429})


class OpenAIEmbedder:
    """Remote embedder speaking the ``/v1/embeddings`` protocol (OpenAI, Ollama, vLLM, TEI).

    POSTs ``{"model": model, "input": [...]}`` to ``{base_url}/embeddings`` in batches of
    ``batch_size``, with ``Authorization: Bearer <api_key>`` when a key is given (a local
    Ollama needs none); without a key, credentials in ``base_url`` (``https://user:pass@host/v1``)
    go as Basic auth, never in the request URL. Blank texts are not sent and get zero rows (if
    the first call holds only blank texts, one request with a probe text learns ``dim``). Rows
    are re-normalised.

    Retries 408, 429, 5xx, connection errors and timeouts up to ``max_retries`` times, waiting
    ``backoff_secs * 2**n`` plus up to 10% jitter, or the numeric ``Retry-After`` the server
    sent (both capped at 30 s). 401/403 and other 4xx fail at once. Every failure raises
    :class:`EmbedderError`, its message redacted (the key, the URL's password and token shapes a
    server may echo back are masked as ``***``). Uses the stdlib only, so HTTP(S)_PROXY and NO_PROXY apply.

    id is ``openai:{model}@{host[:port]}``: the same model name can mean different weights on
    different servers (OpenAI vs an Ollama tag), so moving to another server re-embeds.
    """

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        batch_size: int = 64,
        max_retries: int = 5,
        timeout_secs: float = 60.0,
        backoff_secs: float = 0.5,
    ) -> None:
        parts = urlsplit(base_url)
        if not model:
            raise ConfigurationError(f"{SPEC_SETTING}: openai needs a model name, e.g. 'openai:MODEL'")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"RECRAWLER_EMBEDDER_BASE_URL must be an http(s) URL, got {redact_url(base_url)!r}"
            )
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_EMBEDDER_BATCH_SIZE must be positive, got {batch_size}")
        if max_retries < 0:
            raise ConfigurationError(f"RECRAWLER_EMBEDDER_MAX_RETRIES must be >= 0, got {max_retries}")
        if not timeout_secs > 0:
            raise ConfigurationError(f"RECRAWLER_EMBEDDER_TIMEOUT_SECS must be positive, got {timeout_secs}")
        if backoff_secs < 0:
            raise ConfigurationError(f"embedder backoff must be >= 0 seconds, got {backoff_secs}")
        host = parts.netloc.rpartition("@")[2]
        self.model: str = model
        # urllib would take user:pass@ for part of the host name: credentials go in a header
        self.url: str = urlunsplit(parts._replace(netloc=host)).rstrip("/") + "/embeddings"
        self.batch_size: int = batch_size
        self.max_retries: int = max_retries
        self.timeout_secs: float = timeout_secs
        self.backoff_secs: float = backoff_secs
        self.id: str = f"openai:{model}@{host}"
        #: search's vector floor: none measured for the models such a server may run (cosines of
        #: unrelated texts differ from model to model): set RECRAWLER_SEARCH_MIN_SIMILARITY
        self.min_similarity: float = 0.0
        self.dim: int | None = None
        self.calls: int = 0
        self.texts: int = 0
        self._api_key: str | None = api_key or None
        self._authorization: str | None = f"Bearer {api_key}" if api_key else None
        secrets = [api_key, parts.password and unquote(parts.password)]
        if parts.password is not None and not api_key:
            userinfo = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
            basic = base64.b64encode(userinfo.encode("utf-8")).decode("ascii")
            self._authorization = f"Basic {basic}"
            secrets.append(basic)
        # what a server may echo back in an error body: never copied into a message
        self._secrets: tuple[str | None, ...] = tuple(secrets)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return the server's embeddings of ``texts``, in order, one request per batch."""
        import numpy as np

        rows = [i for i, blank in enumerate(blank_mask(texts)) if not blank]
        if not rows and self.dim is None and texts:
            self._post([PROBE_TEXT])
        parts = [
            self._post([texts[i] for i in rows[start : start + self.batch_size]])
            for start in range(0, len(rows), self.batch_size)
        ]
        out = np.zeros((len(texts), self.dim or 0), dtype=np.float32)
        if rows:
            out[rows] = np.concatenate(parts)
        self.texts += len(texts)
        return normalise(out)

    def close(self) -> None:
        """Do nothing: each request uses its own connection."""

    def _sleep(self, secs: float) -> None:
        """Wait before a retry (tests override this)."""
        time.sleep(secs)

    def _post(self, batch: list[str]) -> NDArray[np.float32]:
        body = json.dumps({"model": self.model, "input": batch}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._authorization:
            headers["Authorization"] = self._authorization
        attempt = 0
        while True:
            attempt += 1
            self.calls += 1
            # The scheme was checked to be http(s) in __init__.
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")  # noqa: S310
            wait: float | None = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_secs) as response:  # noqa: S310
                    payload = response.read()
            except urllib.error.HTTPError as exc:
                detail = _error_message(_read_error_body(exc))
                if exc.code not in _RETRY_STATUSES and exc.code < 500:
                    raise self._error(self._client_error(exc.code, detail)) from None
                last = f"last status {_status(exc.code)}"
                wait = _retry_after(exc.headers.get("Retry-After"))
                error: Exception = exc
            except (OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                last = f"last error {one_line(str(reason)) or type(reason).__name__}"
                error = exc
            else:
                return self._parse(payload, len(batch))
            if attempt > self.max_retries:
                raise self._error(f"POST {self.url} failed after {attempt} attempts, {last}") from error
            self._sleep(self._backoff(attempt) if wait is None else wait)

    def _error(self, message: str) -> EmbedderError:
        return EmbedderError(redact_text(message, self._secrets))

    def _backoff(self, attempt: int) -> float:
        base = min(self.backoff_secs * 2.0 ** (attempt - 1), _MAX_WAIT_SECS)
        return base + random.uniform(0, base / 10)  # noqa: S311 (jitter, not cryptography)

    def _client_error(self, status: int, detail: str) -> str:
        server = f" ({detail})" if detail else ""
        if status in (401, 403):
            hint = _KEY_HINT if self._api_key is None else f"the API key was refused, check it ({_KEY_HINT})"
            return f"{_status(status)} from {self.url}: {hint}{server}"
        return f"{_status(status)} from {self.url}: {detail or 'no error message'}"

    def _parse(self, payload: bytes, expected: int) -> NDArray[np.float32]:
        import numpy as np

        try:
            data = sorted(json.loads(payload)["data"], key=lambda item: item["index"])
            rows = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise self._error(
                f"malformed response from {self.url}: {type(exc).__name__}: {one_line(str(exc))}"
            ) from exc
        if rows.ndim != 2 or rows.shape[0] != expected or rows.shape[1] == 0:
            raise self._error(f"{self.url} returned {rows.shape[0]} embeddings for {expected} texts")
        if self.dim is None:
            self.dim = int(rows.shape[1])
        elif rows.shape[1] != self.dim:
            raise self._error(f"{self.url} returned {rows.shape[1]} dimensions, expected {self.dim}")
        return rows


def _status(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def _error_message(body: bytes) -> str:
    """Return the server's error message: OpenAI's ``{"error": {"message"}}``, else the body text."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        return one_line(text)
    if isinstance(doc, dict):
        error = doc.get("error", doc)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return one_line(str(message))
    return one_line(text)


def _read_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        # The error body is only used for the message; the status decides what happens.
        return b""
    finally:
        exc.close()


def _retry_after(value: str | None) -> float | None:
    """Return a numeric Retry-After in seconds, capped; HTTP-dates fall back to backoff (RFC 9110 §10.2.3)."""
    if value is None:
        return None
    try:
        secs = float(value)
    except ValueError:
        return None
    if not math.isfinite(secs) or secs < 0:
        return None
    return min(secs, _MAX_WAIT_SECS)
