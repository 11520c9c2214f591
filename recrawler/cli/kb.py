"""``recrawler search`` and ``recrawler chunks``: the published knowledge base."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.cli.output import Column, Table, json_line, when
from recrawler.cli.runs import embedder_options
from recrawler.cli.settings import db_uri
from recrawler.index import open_kb

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

#: what search and chunks say before any run published a knowledge base
NOTHING_PUBLISHED = (
    "no run has published yet: the knowledge base is empty (crawl first, or see `recrawler runs`)"
)


def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Search the published knowledge base; hits scoring ``--min-score`` or less are left out."""
    table = Table(
        out,
        [Column("SCORE", 5, right=True), Column("VERIFIED", 16), Column("CHANGED", 16), Column("URL")],
        empty=f"no match above score {args.min_score:g}",
    )
    with open_kb(db_uri(settings), embedder=args.embedder, **embedder_options(settings)) as kb:
        if not kb.published_run():
            # nothing to search: not "no match"
            if not args.json:
                out.write(NOTHING_PUBLISHED + "\n")
            return 0
        # k nearest chunks are k chunks, related or not: a score at or below the floor is no match
        for hit in (h for h in kb.search(args.query, k=args.k, site=args.site) if h.score > args.min_score):
            if args.json:
                out.write(json_line(hit.to_dict()))
                continue
            body = " ".join(hit.text.split())
            table.row(f"{hit.score:.3f}", when(hit.last_checked), when(hit.last_changed), hit.url)
            out.write(
                f"       {hit.heading or hit.title or ''}\n"
                f"       {body[:240]}{'...' if len(body) > 240 else ''}\n"
            )
    if not args.json:
        table.end()
    return 0


def cmd_chunks(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Dump the published knowledge base, one chunk per line."""
    table = Table(
        out,
        [Column("CHUNK", right=True), Column("CHARS", right=True), Column("URL", 50), Column("HEADING")],
        empty=NOTHING_PUBLISHED,
    )
    with open_kb(db_uri(settings), embedder="hashing") as kb:
        if not kb.published_run():
            if not args.json:
                out.write(NOTHING_PUBLISHED + "\n")
            return 0
        for chunk in kb.chunks():
            if args.json:
                out.write(json_line(chunk.to_dict()))
            else:
                table.row(chunk.chunk_index, len(chunk.text), chunk.url, chunk.heading)
    if not args.json:
        table.end()
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``search`` and ``chunks``."""
    p = sub.add_parser("search", parents=db, help="search the published knowledge base")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="number of chunks, at most (default %(default)s)")
    p.add_argument(
        "--min-score",
        type=float,
        default=0.0,
        metavar="SCORE",
        help="leave out hits scoring this or less (default %(default)s: no unrelated chunks)",
    )
    p.add_argument("--site", help="only this site's pages (a host, as in `recrawler pages`); default: all")
    p.add_argument("--json", action="store_true", help="one JSON object per hit")
    p.add_argument("--embedder", help="embedder spec (default: the one the last published run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL (as RECRAWLER_EMBEDDER_BASE_URL)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("chunks", parents=db, help="dump the published knowledge base")
    p.add_argument("--json", action="store_true", help="one JSON object per chunk")
    p.set_defaults(func=cmd_chunks)
