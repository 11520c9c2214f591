"""The hand-over of a page's CPU work: the job sent, the work made of it (:func:`process_page`, the
same in every process) and what rides on the Page to the pipelines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.detect.hashing import content_hash
from recrawler.detect.noise import Fingerprint, SiteNoise, fingerprint
from recrawler.documents import HTML, Documents
from recrawler.encoding import read_bom
from recrawler.extract import Content, ContentExtractor, ExtractionError
from recrawler.state.records import packed_text, samples_json

if TYPE_CHECKING:
    from lxml.cssselect import CSSSelector
    from scrapy.http import TextResponse
    from scrapy.settings import BaseSettings

    from recrawler.kb.chunking import Chunk, Chunker
    from recrawler.pdf import PdfLimits


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodingOf:
    """How a response's encoding is read, for the worker to read it as Scrapy would: the
    response's class, its Content-Type header and the encoding it was built with (if any)."""

    response_class: type[TextResponse]
    content_type: bytes | None = None
    declared: str | None = None

    @classmethod
    def of(cls, response: TextResponse) -> EncodingOf:
        """What reading *response*'s encoding takes besides its body."""
        # TextResponse's own rules read the encoding it was built with, the body and Content-Type
        return cls(
            response_class=type(response),
            content_type=response.headers.get(b"Content-Type"),
            declared=response._encoding,
        )

    def read(self, url: str, body: bytes) -> str:
        """The encoding the crawl's process reads the page in (:func:`response_encoding`: its byte
        order mark's, else Scrapy's from the header, ``<meta>``, then detection)."""
        bom = read_bom(body)[0]
        if bom is not None:
            return bom
        headers = {b"Content-Type": self.content_type} if self.content_type is not None else None
        return self.response_class(url=url, body=body, headers=headers, encoding=self.declared).encoding


@dataclass(frozen=True, slots=True, kw_only=True)
class PageJob:
    """One page's CPU work, as sent to a worker."""

    key: str
    url: str
    body: bytes
    #: the body's encoding, or how the worker reads it (the crawl's process never scans the body)
    encoding: str | EncodingOf
    #: the body's document type (see :mod:`recrawler.documents`), and how much of a PDF is read
    kind: str = HTML
    pdf: PdfLimits | None = None
    #: the site's learned volatile regions (CSS selectors), dropped before rendering
    regions: tuple[str, ...] = ()
    #: the digest of the site's pickled noise model, to fingerprint under (None: not loaded yet)
    noise_id: bytes | None = None
    #: the pickled model itself, sent until the workers have it (see :meth:`CpuPool.noise`)
    noise: bytes | None = None
    #: the stored page's normalised hash when it has chunks: a page still hashing to it is not
    #: chunked (None: new, or no chunks stored)
    indexed_hash: str | None = None
    #: the run's hashing embedder's dimension: the page's chunk texts are embedded with its
    #: chunks (0: not, the run's end embeds them)
    embed_dim: int = 0
    #: a page the database does not hold yet: its field record's stored forms are made too
    new: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PageWork:
    """What :func:`process_page` made of a page: its content (or why there is none), fingerprint
    and chunks."""

    content: Content | None = None
    error: str | None = None
    content_hash: str | None = None
    fingerprint: Fingerprint | None = None
    chunks: list[Chunk] | None = None
    #: (chunk hash, float32 vector bytes) of the chunk texts this worker had not embedded yet
    vectors: list[tuple[str, bytes]] | None = None
    #: the job named a noise model this worker does not hold: no fingerprint, send it again
    model_missing: bool = False
    #: the stored forms of the page's field record (:class:`~recrawler.state.records.FieldsRow`),
    #: made when its record will be written: a new page, or one whose hash moved
    packed_text: bytes | None = None
    samples_json: str | None = None


@dataclass(slots=True, kw_only=True)
class Worked:
    """A page's fingerprint and chunks made by :func:`process_page` (in a worker process or in
    the crawl's), handed from the spider to the pipelines on the Page; valid only under the very
    noise model they were made with."""

    noise: SiteNoise | None
    fingerprint: Fingerprint | None
    chunks: list[Chunk] | None
    #: (chunk hash, vector bytes) the worker embedded with the chunks (hashing embedder)
    vectors: list[tuple[str, bytes]] | None = None
    #: the field record's stored forms (see :class:`PageWork`)
    packed_text: bytes | None = None
    samples_json: str | None = None


def process_page(
    job: PageJob,
    extractor: ContentExtractor,
    *,
    regions: CSSSelector | None = None,
    noise: SiteNoise | None = None,
    chunker: Chunker | None = None,
) -> PageWork:
    """A page's CPU work, the same wherever it runs (a worker process, a CPU thread, the reactor):
    its content (*regions*: the site's learned volatile regions, dropped first), the text's hash,
    the fingerprint under *noise* (None: none made), the chunks unless the page still hashes to
    what is indexed (*chunker* None: none), and the stored forms of the field record it will be
    written with. Pure: it keeps nothing."""
    try:
        encoding = job.encoding if isinstance(job.encoding, str) else job.encoding.read(job.url, job.body)
        content = Documents(extractor, job.pdf).read(
            job.kind, job.body, encoding, regions=regions, url=job.url
        )
    except ExtractionError as exc:
        return PageWork(error=exc.reason)
    if not content.text.strip():
        return PageWork(content=content)
    fp = fingerprint(content.text, noise) if noise is not None else None
    chunks = None
    if chunker is not None and fp is not None and fp.content_hash != job.indexed_hash:
        chunks = chunker.chunk(content.text, key=job.key, url=job.url, headings=content.headings)
    # the page's field record will be written (new, or its hash moved): its stored forms here,
    # with the rest of its CPU work; the samples only for a new page (every block is added)
    moved = job.indexed_hash is not None and fp is not None and fp.content_hash != job.indexed_hash
    return PageWork(
        content=content,
        content_hash=content_hash(content.text),
        fingerprint=fp,
        chunks=chunks,
        packed_text=packed_text(content.text) if fp is not None and (job.new or moved) else None,
        samples_json=samples_json(fp.samples) if fp is not None and job.new else None,
    )


def chunk_settings(settings: BaseSettings) -> tuple[int, int, int] | None:
    """How pages are chunked (``RECRAWLER_CHUNK_SIZE``, ``_OVERLAP``, ``_MAX_PER_PAGE``) when the
    knowledge base is kept (``RECRAWLER_INDEX_ENABLED``), else None."""
    if not settings.getbool("RECRAWLER_INDEX_ENABLED"):
        return None
    return (
        settings.getint("RECRAWLER_CHUNK_SIZE"),
        settings.getint("RECRAWLER_CHUNK_OVERLAP"),
        settings.getint("RECRAWLER_CHUNK_MAX_PER_PAGE"),
    )


__all__ = ["EncodingOf", "PageJob", "PageWork", "Worked", "chunk_settings", "process_page"]
