"""``recrawler search`` and ``recrawler chunks``: the published knowledge base."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler.cli.output import Column, Table, json_line, when
from recrawler.cli.settings import db_uri
from recrawler.exceptions import ConfigurationError
from recrawler.kb.ranking import MODES
from recrawler.kb.reader import open_kb

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

#: what search and chunks say before any run published a knowledge base
NOTHING_PUBLISHED = (
    "no run has published yet: the knowledge base is empty (crawl first, or see `recrawler runs`)"
)


def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Search the published knowledge base; hits scoring ``--min-score`` or less are left out."""
    base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
    options: dict[str, Any] = {"base_url": base_url} if base_url else {}
    return _search(
        args,
        db_uri(settings),
        options,
        out,
        settings.getfloat("RECRAWLER_SEARCH_CACHE_MB"),
        settings.get("RECRAWLER_SEARCH_DEFAULT_VERSION") or None,
    )


def _search(
    args: argparse.Namespace,
    uri: str,
    options: dict[str, Any],
    out: TextIO,
    cache_mb: float | None = None,
    default_version: str | None = None,
) -> int:
    table = Table(
        out,
        [Column("SCORE", 5, right=True), Column("VERIFIED", 16), Column("CHANGED", 16), Column("URL")],
        empty=f"no match above score {args.min_score:g}",
    )
    with open_kb(
        uri, embedder=args.embedder, cache_mb=cache_mb, default_version=default_version, **options
    ) as kb:
        if not kb.published_run():
            # nothing to search: not "no match"
            if not args.json:
                out.write(NOTHING_PUBLISHED + "\n")
            return 0
        # k nearest chunks are k chunks, related or not: a score at or below the floor is no match
        hits = kb.search(
            args.query, k=args.k, site=args.site, mode=args.mode, version=args.version, lang=args.lang
        )
        for hit in (h for h in hits if h.score > args.min_score):
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


def fast_search(
    argv: Sequence[str] | None,
    flag_parsers: Callable[[object], tuple[argparse.ArgumentParser, argparse.ArgumentParser]],
    out: TextIO,
) -> int | None:
    """Run ``recrawler search`` without loading Scrapy when its settings are its own flags and
    the environment: ``--db`` or ``$RECRAWLER_DB_URI`` given, no ``-s``, no Scrapy project (no
    ``scrapy.cfg`` here or above, no ``$SCRAPY_SETTINGS_MODULE``). The answer is the one the
    full settings give (a project's settings could change it: then None, and the caller builds
    them). None when this is not such a call."""
    import sys

    tokens = list(sys.argv[1:] if argv is None else argv)
    i = 0
    # the command is the first word after the flags given before it
    while i < len(tokens) and (tokens[i] in ("-s", "--db") or tokens[i].startswith("--db=")):
        i += 1 if tokens[i].startswith("--db=") else 2
    if i >= len(tokens) or tokens[i] != "search" or os.environ.get("SCRAPY_SETTINGS_MODULE"):
        return None
    here = Path.cwd().resolve()
    if any((d / "scrapy.cfg").exists() for d in (here, *here.parents)):
        return None
    _, top = flag_parsers(None)
    parser = argparse.ArgumentParser(prog="recrawler", parents=[top], add_help=False)
    sub = parser.add_subparsers(dest="command", required=True)
    _, db = flag_parsers(argparse.SUPPRESS)
    add_parsers(sub, [db])
    args = parser.parse_args(tokens)
    uri = args.db or os.environ.get("RECRAWLER_DB_URI")
    if args.command != "search" or args.global_set or getattr(args, "set", None) or not uri:
        return None
    return _search(args, uri, {"base_url": args.base_url} if args.base_url else {}, out)


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


def cmd_changes(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """What the published runs after ``--since`` did to each page, with its text and chunks."""
    if args.since is None and args.cursor is None:
        raise ConfigurationError("changes: give --since RUN (0: everything) or --cursor CURSOR")
    with open_kb(db_uri(settings), embedder="hashing") as kb:
        batch = kb.changes(
            args.since,
            cursor=args.cursor,
            limit=args.limit,
            key=args.key,
            version=args.version,
            lang=args.lang,
        )
    if args.json:
        for change in batch.changes:
            out.write(json_line(change.to_dict()))
        # the last line: where the next call resumes (a cursor stays valid across runs)
        out.write(json_line({"cursor": batch.cursor, "upto": batch.upto, "done": batch.done}))
        return 0
    table = Table(
        out,
        [Column("ACTION", 11), Column("RUN", right=True), Column("CHUNKS", right=True), Column("URL")],
        empty=f"no page changed by a run published after run {args.since}",
    )
    for change in batch.changes:
        table.row(change.action, change.run_id, len(change.chunks), change.moved_to or change.url)
    table.end()
    more = "more" if not batch.done else f"up to run {batch.upto}; next time"
    out.write(f"{more}: recrawler changes --cursor {batch.cursor}\n")
    return 0


def cmd_sync(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Mirror the published knowledge base into a LangChain vector store (``--store`` builds it)."""
    from recrawler.extensions.sinks import sync_sink

    counts = sync_sink(db_uri(settings), args.name, args.store)
    out.write(
        f"sink {args.name}: {counts['added']} added, {counts['deleted']} deleted, {counts['kept']} kept\n"
    )
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
    p.add_argument(
        "--version",
        help="only this version's pages, and pages with none ('*': every version; default: "
        "RECRAWLER_SEARCH_DEFAULT_VERSION, else every version)",
    )
    p.add_argument("--lang", help="only this language's pages, and pages with none (en finds en-US too)")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="hybrid",
        help="hybrid: words and vectors fused (default); vector: cosine; keyword: words only",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per hit")
    p.add_argument("--embedder", help="embedder spec (default: the one the last published run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL (as RECRAWLER_EMBEDDER_BASE_URL)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser(
        "changes", parents=db, help="pages the published runs after a run changed, with their text and chunks"
    )
    p.add_argument("--since", type=int, metavar="RUN", help="after this run (0: everything published)")
    p.add_argument("--cursor", help="resume where an earlier call stopped (its last line)")
    p.add_argument("--limit", type=int, default=100, help="pages per call, at most (default %(default)s)")
    p.add_argument("--key", help="only this page key")
    p.add_argument(
        "--version", help="only this version's pages, and pages with none (default: every version)"
    )
    p.add_argument("--lang", help="only this language's pages, and pages with none (en finds en-US too)")
    p.add_argument("--json", action="store_true", help="one JSON object per page, then the cursor")
    p.set_defaults(func=cmd_changes)

    p = sub.add_parser("sync", parents=db, help="mirror the published knowledge base into a vector store")
    p.add_argument(
        "--store", required=True, metavar="MODULE.FACTORY", help="a callable returning the VectorStore"
    )
    p.add_argument("--name", required=True, help="the sink's name (its ledger in the database)")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("chunks", parents=db, help="dump the published knowledge base")
    p.add_argument("--json", action="store_true", help="one JSON object per chunk")
    p.set_defaults(func=cmd_chunks)
