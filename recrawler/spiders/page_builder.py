"""Responses into Page items: a 304 without parsing, a 200 read and hashed, in this process or in a
CPU worker (the same Page either way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy.http import TextResponse

from recrawler import meta
from recrawler.cpu import EncodingOf, PageJob, Worked, chunk_settings, process_page
from recrawler.detect.hashing import content_hash
from recrawler.detect.regions import volatile_regions
from recrawler.documents import HTML, Documents, pdf_limits
from recrawler.encoding import response_encoding
from recrawler.extract import Content, ContentExtractor, looks_binary
from recrawler.facets import FacetPattern
from recrawler.items import Page, Unread
from recrawler.kb.chunking import Chunker
from recrawler.state.records import LIVE, PageRecord
from recrawler.urls import KeyMaker, key_host

if TYPE_CHECKING:
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from recrawler.cpu import CpuPool, PageWork
    from recrawler.detect.noise import SiteNoise
    from recrawler.learning import NoiseRegistry
    from recrawler.pdf import PdfLimits


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None


class PageBuilder:
    """Turns responses into Page items: a 304 without parsing, a 200 read (HTML, or a PDF within
    *pdf*'s limits; None: PDFs are ``not_html`` errors) and hashed. Its CPU work is
    :func:`~recrawler.cpu.process_page`, in this process (:meth:`page`) or in a worker process
    (:meth:`page_in_worker`): the Page is the same either way."""

    def __init__(
        self,
        extractor: ContentExtractor,
        key_maker: KeyMaker,
        noise: NoiseRegistry | None = None,
        pdf: PdfLimits | None = None,
        chunker: Chunker | None = None,
        facets: FacetPattern | None = None,
    ) -> None:
        self.extractor = extractor
        #: the version and language URLs give (``RECRAWLER_VERSION_PATTERN``; None: not set)
        self.facets = facets
        self.key_maker = key_maker
        self.noise = noise
        self.documents = Documents(extractor, pdf)
        #: chunks the pages the knowledge base will take (None: no knowledge base)
        self.chunker = chunker

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Build from ``RECRAWLER_CONTENT_*``, ``RECRAWLER_URL_*``, ``RECRAWLER_PDF_*``,
        ``RECRAWLER_VERSION_PATTERN`` and (with ``RECRAWLER_INDEX_ENABLED``) ``RECRAWLER_CHUNK_*``
        settings."""
        chunking = chunk_settings(settings)
        return cls(
            ContentExtractor(
                settings.getlist("RECRAWLER_CONTENT_SELECTORS"),
                settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS"),
            ),
            KeyMaker(
                settings.getlist("RECRAWLER_URL_DROP_PARAMS"),
                settings.getlist("RECRAWLER_URL_KEEP_PARAMS"),
            ),
            pdf=pdf_limits(settings),
            chunker=Chunker(*chunking) if chunking is not None else None,
            facets=FacetPattern.from_setting(settings.get("RECRAWLER_VERSION_PATTERN")),
        )

    def page(self, response: Response, lastmod: str | None = None) -> Page:
        """Return the Page for *response* (call it from any spider callback), its CPU work done here."""
        page, body = self.head(response, lastmod)
        if not body:
            return page
        html = page.document == HTML
        model = regions = None
        if self.noise is not None:
            site = key_host(page.key)
            first = response.meta.get(meta.FIRST_BODY)
            if html and first is not None:
                # a second fetch moments after the first: what differs between them is volatile
                assert isinstance(response, TextResponse)
                page.rechecked = True
                learned = self._learn(first, response, self.noise.site(site))
                if learned:
                    page.learned_regions = tuple(learned)
                    self.noise.learned(site, learned)
            model = self.noise.ready(site)
            # a document with no markup: no volatile regions to drop
            regions = self.noise.site(site).regions_css if html else None
        # the encoding Scrapy read (a document with no markup has none)
        encoding = response_encoding(response) if isinstance(response, TextResponse) else ""
        work = process_page(
            self._job(page, response, encoding),
            self.extractor,
            regions=regions,
            noise=model,
            chunker=self.chunker,
        )
        return self._worked(page, response, work, model)

    async def page_in_worker(self, response: Response, lastmod: str | None, pool: CpuPool) -> Page | None:
        """:meth:`page` with its CPU work done by a worker process, in one hand-over: the
        content, the fingerprint under the site's noise model (once loaded) and, unless the page
        still hashes to what is indexed, the chunks. None when the workers are gone."""
        page, body = self.head(response, lastmod)
        if not body:
            return page
        model = None
        regions: tuple[str, ...] = ()
        if self.noise is not None:
            site = key_host(page.key)
            model = self.noise.ready(site)
            regions = (model or self.noise.site(site)).regions if page.document == HTML else ()
        noise_id, noise = pool.noise(model) if model is not None else (None, None)
        job = self._job(
            page,
            response,
            # the worker reads the encoding as Scrapy would: the crawl's process never scans the body
            EncodingOf.of(response) if isinstance(response, TextResponse) else "",
            regions=regions,
            noise_id=noise_id,
            noise=noise,
            # a page the database does not hold yet: a changed one waits for the run's verdict
            embed_dim=pool.embed_dim if page.record is None else 0,
        )
        work = await pool.work(job)
        if work is None:
            return None
        return self._worked(page, response, work, model)

    def _job(self, page: Page, response: Response, encoding: str | EncodingOf, **extra: Any) -> PageJob:
        """The page's CPU work as one job (*extra*: what a worker process needs besides)."""
        rec = page.record
        indexed = None
        if isinstance(rec, PageRecord) and rec.chunks and rec.status == LIVE:
            # a page still hashing to what is indexed is not chunked again
            indexed = rec.content_hash
        return PageJob(
            key=page.key,
            url=page.url,
            body=response.body,
            encoding=encoding,
            kind=str(page.document),
            pdf=self.documents.pdf,
            indexed_hash=indexed,
            new=rec is None,
            **extra,
        )

    def _worked(self, page: Page, response: Response, work: PageWork, model: SiteNoise | None) -> Page:
        """Complete *page* with what :func:`~recrawler.cpu.process_page` made of it."""
        if work.error is not None:
            # a page the parser would truncate (too_deep), an unreadable PDF: stored state stays
            page.error = work.error
            return page
        assert work.content is not None
        if work.fingerprint is not None:  # chunks come only with a fingerprint
            page.worked = Worked(
                noise=model,
                fingerprint=work.fingerprint,
                chunks=work.chunks,
                vectors=work.vectors,
                packed_text=work.packed_text,
                samples_json=work.samples_json,
            )
        return self.fill(page, response, work.content, work.content_hash)

    def head(self, response: Response, lastmod: str | None = None) -> tuple[Page, bool]:
        """The Page's URL, key, validators, origin and document type; False when there is no body
        to read (a 304, or a body that is no document recrawler reads: a ``not_html`` error)."""
        key = response.meta.get(meta.KEY) or self.key_maker(
            (response.meta.get("redirect_urls") or [response.url])[0]
        )
        page = Page(
            # a temporary redirect serves the page from elsewhere: it is still cited at its own URL
            # (a markdown twin, at its page's), without the tracking parameters its key drops
            url=self.key_maker.clean_url(
                response.meta.get(meta.PAGE_URL) or response.meta.get(meta.CANONICAL_URL) or response.url
            ),
            key=key,
            http_status=response.status,
            etag=_header(response, b"ETag"),
            last_modified=_header(response, b"Last-Modified"),
            lastmod=lastmod,
            found_via=response.meta.get(meta.FOUND_VIA),
            found_from=response.meta.get(meta.FOUND_FROM),
            found_depth=int(response.meta.get(meta.DEPTH) or 0),
            moved_from=tuple(response.meta.get(meta.MOVED_FROM, ())),
            served_from=self.key_maker(response.url) if response.meta.get(meta.CANONICAL_URL) else None,
            loan=response.meta.get(meta.LOAN),
            # what the request side read of the page's stored state, for the pipelines
            record=response.meta.get(meta.RECORD, Unread.UNREAD),
        )
        if self.facets is not None:
            page.version, page.lang = self.facets.of(page.url)
        if response.status == 304:
            return page, False
        ctype = (response.headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower()
        kind = self.documents.kind(
            ctype, response.body, text=isinstance(response, TextResponse), path=urlsplit(response.url).path
        )
        if kind is None or (
            kind == HTML
            and isinstance(response, TextResponse)
            # binary content served as text/html (an executable, an archive): never text. Judged by
            # its bytes first: reading the encoding scans the body, and only UTF-16/32 (NUL bytes)
            # are judged again by their characters
            and looks_binary(response.body)
            and looks_binary(response.body, response_encoding(response))
        ):
            page.error = "not_html"
            return page, False
        page.document = kind
        return page, True

    def fill(self, page: Page, response: Response, content: Content, text_hash: str | None = None) -> Page:
        """Complete *page* with its extracted *content* (*text_hash*: its text's hash, if known)."""
        page.title = content.title
        page.region_hits = content.region_hits
        # what the URL pattern names wins; the rest is what the page says of itself
        page.version = page.version or content.version
        page.lang = page.lang or content.lang
        if not content.text.strip():
            # Empty content is never "unchanged": it is an error and stored state stays as it was.
            page.error = "empty_content"
            return page
        page.text = content.text
        if response.meta.get(meta.SAME_VALIDATOR) and page.document == HTML:
            # kept to learn the regions that differ when the page is fetched again (HTML only)
            page.raw_body = response.body
        page.headings = content.headings
        page.code = content.code
        page.links = content.links
        page.content_hash = text_hash or content_hash(content.text)
        return page

    def _learn(self, first: bytes, response: TextResponse, site: SiteNoise) -> list[str]:
        encoding = response_encoding(response)
        _, a = self.extractor.main(first, encoding)
        _, b = self.extractor.main(response.body, encoding)
        if a is None or b is None:
            return []
        if site.regions_css is not None:
            for main in (a, b):
                for el in site.regions_css(main):
                    parent = el.getparent()
                    if parent is not None:
                        parent.remove(el)
        return volatile_regions(a, b, site.normalizer.normalize)
