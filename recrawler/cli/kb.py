"""``recrawler search`` and ``recrawler chunks``: the published knowledge base."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler.cli.output import Column, Table, json_line, when
from recrawler.cli.settings import db_uri
from recrawler.exceptions import ConfigurationError
from recrawler.kb.ranking import MODES
from recrawler.kb.reader import open_kb
from recrawler.redact import redact_url
from recrawler.times import parse_time

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

#: more chunks than a search returns (``-k 1e20`` is all of them, not an overflow)
_MAX_K = 10_000
#: what search and chunks say before any run published a knowledge base
NOTHING_PUBLISHED = (
    "no run has published yet: the knowledge base is empty (crawl first, or see `recrawler runs`)"
)


def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Search the published knowledge base; hits scoring ``--min-score`` or less are left out."""
    base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
    options: dict[str, Any] = {"base_url": base_url} if base_url else {}
    floor = settings.get("RECRAWLER_SEARCH_MIN_SIMILARITY")
    if floor is not None:
        options["min_similarity"] = settings.getfloat("RECRAWLER_SEARCH_MIN_SIMILARITY")
    return _search(
        args,
        db_uri(settings),
        options,
        out,
        settings.getfloat("RECRAWLER_SEARCH_CACHE_MB"),
        settings.get("RECRAWLER_SEARCH_DEFAULT_VERSION") or None,
    )


def _no_match(args: argparse.Namespace, floor: float) -> str:
    """What a search that found nothing says: what a hit needs, not a padded list."""
    if args.mode == "keyword":
        why = "no chunk has a word of the query"
    elif args.mode == "vector":
        why = f"no chunk is similar to it above {floor:g}"
    else:
        why = f"no chunk has a word of the query or is similar to it above {floor:g}"
    above = f" scoring above {args.min_score:g}" if args.min_score > 0 else ""
    return f"no match{above}: {why} (the similarity floor: --min-similarity)"


def _search(
    args: argparse.Namespace,
    uri: str,
    options: dict[str, Any],
    out: TextIO,
    cache_mb: float | None = None,
    default_version: str | None = None,
) -> int:
    if args.k < 1:
        raise ConfigurationError(f"search: -k must be 1 or more, got {args.k}")
    # more chunks than any knowledge base holds is all of them (and a number SQLite can bind)
    args.k = min(args.k, _MAX_K)
    with open_kb(
        uri, embedder=args.embedder, cache_mb=cache_mb, default_version=default_version, **options
    ) as kb:
        table = Table(
            out,
            [Column("SCORE", 5, right=True), Column("VERIFIED", 16), Column("CHANGED", 16), Column("URL")],
            empty=_no_match(args, getattr(kb, "min_similarity", 0.0)),
        )
        if not kb.published_run() or next(iter(kb.chunks()), None) is None:
            # nothing to search (no run published, or none published a page yet): not "no match"
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


def _count(text: str) -> int:
    """A number of chunks: ``5``, or ``1e20`` (a whole number written as a float: all of them)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(min(value, _MAX_K))


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
    options: dict[str, Any] = {"base_url": args.base_url} if args.base_url else {}
    if args.min_similarity is not None:
        options["min_similarity"] = args.min_similarity
    return _search(args, uri, options, out)


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


def _since(text: str) -> int | datetime:
    """``--since``: a run id (``0``: everything published), or a time (``7d``, ``2026-11-24``)."""
    if text.strip().isdigit():
        return int(text)
    return parse_time(text, name="changes: --since")


def cmd_changes(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """What the published runs after ``--since`` did to each page, with its text and chunks."""
    if args.since is None and args.cursor is None:
        raise ConfigurationError("changes: give --since RUN or AGE (0: everything; 7d) or --cursor CURSOR")
    uri = db_uri(settings)
    with open_kb(uri, embedder="hashing") as kb:
        since = _since(args.since) if args.since is not None else None
        batch = kb.changes(
            since,
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
        empty=f"no page changed by a run published after run {batch.since}",
    )
    for change in batch.changes:
        table.row(change.action, change.run_id, len(change.chunks), change.moved_to or change.url)
    table.end()
    more = "more" if not batch.done else f"up to run {batch.upto}; next time"
    # the command to run as it is, database included (its password masked: give it as you did)
    again = f"recrawler changes --cursor {batch.cursor} --db {shlex.quote(redact_url(uri))}"
    out.write(f"{more}: {again}\n")
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
    p.add_argument("-k", type=_count, default=5, help="number of chunks, at most (default %(default)s)")
    p.add_argument(
        "--min-score",
        type=float,
        default=0.0,
        metavar="SCORE",
        help="leave out hits scoring this or less (default %(default)s: no unrelated chunks)",
    )
    p.add_argument(
        "--min-similarity",
        type=float,
        metavar="COSINE",
        help="vector hits need a similarity above this (as RECRAWLER_SEARCH_MIN_SIMILARITY; "
        "default: the embedder's floor, 0.40 for hashing and all-MiniLM-L6-v2)",
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
    p.add_argument(
        "--since",
        metavar="RUN|AGE",
        help="after this run (0: everything published), or published after a time (7d, 2026-11-24)",
    )
    p.add_argument("--cursor", help="resume where an earlier call stopped (its last line)")
    p.add_argument("--limit", type=int, default=100, help="pages per call, 1 or more (default %(default)s)")
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
