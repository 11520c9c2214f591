"""``recrawler search`` and ``recrawler chunks``: the published knowledge base."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from recrawler.cli.output import when
from recrawler.cli.runs import embedder_options
from recrawler.cli.settings import db_uri
from recrawler.index import open_kb

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Search the published knowledge base."""
    with open_kb(db_uri(settings), embedder=args.embedder, **embedder_options(settings)) as kb:
        for hit in kb.search(args.query, k=args.k, site=args.site):
            if args.json:
                out.write(json.dumps(hit.to_dict()) + "\n")
                continue
            body = " ".join(hit.text.split())
            out.write(
                f"{hit.score:.3f}  {hit.url}\n       {hit.heading or hit.title or ''}"
                f"  (verified {when(hit.last_checked)}, changed {when(hit.last_changed)})\n"
                f"       {body[:240]}{'...' if len(body) > 240 else ''}\n\n"
            )
    return 0


def cmd_chunks(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Dump the published knowledge base, one chunk per line."""
    with open_kb(db_uri(settings), embedder="hashing") as kb:
        for chunk in kb.chunks():
            if args.json:
                out.write(json.dumps(chunk.to_dict()) + "\n")
            else:
                out.write(f"{chunk.url}\t{chunk.chunk_index}\t{chunk.heading}\t{len(chunk.text)} chars\n")
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``search`` and ``chunks``."""
    p = sub.add_parser("search", parents=db, help="search the published knowledge base")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="number of chunks (default %(default)s)")
    p.add_argument("--site", help="only this site's pages (a host, as in `recrawler pages`); default: all")
    p.add_argument("--json", action="store_true", help="one JSON object per hit")
    p.add_argument("--embedder", help="embedder spec (default: the one the last published run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL (as RECRAWLER_EMBEDDER_BASE_URL)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("chunks", parents=db, help="dump the published knowledge base")
    p.add_argument("--json", action="store_true", help="one JSON object per chunk")
    p.set_defaults(func=cmd_chunks)
