"""Serve the bundled example docs site on 127.0.0.1 with its own sitemap.

    python examples/serve.py [--port 8000] [--version v1|v2 | --dir FOLDER]

Then crawl it: ``scrapy crawl docs -a sitemap_url=http://127.0.0.1:8000/sitemap.xml``. The sitemap
lists the version's pages at the address the server listens on, each with its ``<lastmod>`` (the
file's modification time, as a static site generator writes it); pages answer ``304`` to
``If-Modified-Since`` as any static server does. ``--dir`` serves a folder of your own (a copy of
``examples/docsite/v1`` to edit, say): an edited, added or deleted page shows in the next crawl.
Stop it with Ctrl-C (started with ``&`` in a shell: ``kill %1``). A port already taken is one
line, exit 2: pass ``--port``.
"""

from __future__ import annotations

import argparse
import functools
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.sax.saxutils import escape

SITE = Path(__file__).resolve().parent / "docsite"


class DocsHandler(SimpleHTTPRequestHandler):
    """Static files, plus ``/sitemap.xml`` listing every page at this server's own address."""

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/sitemap.xml":
            super().do_GET()
            return
        host, port = self.server.server_address[:2]
        base = f"http://{host}:{port}"
        root = Path(self.directory)
        entries = "".join(
            f"  <url><loc>{escape(f'{base}/{page.name}')}</loc><lastmod>{lastmod(page)}</lastmod></url>\n"
            for page in sorted(root.glob("*.html"))
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}</urlset>\n'
        ).encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def lastmod(page: Path) -> str:
    """The page's last modification, as a sitemap's W3C datetime."""
    return datetime.fromtimestamp(page.stat().st_mtime, UTC).isoformat(timespec="seconds")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--version", choices=["v1", "v2"], default="v1", help="which version of the site")
    parser.add_argument("--dir", type=Path, help="serve this folder instead (its *.html pages)")
    args = parser.parse_args()
    folder = args.dir or SITE / args.version
    handler = functools.partial(DocsHandler, directory=str(folder))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    except OSError as exc:
        # one line, not a traceback: the port is most often taken by another server
        parser.exit(
            2,
            f"serve.py: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}; "
            "use another port (--port 8001, or --port 0 for any free one)\n",
        )
    host, port = server.server_address[:2]
    print(
        f"serving {args.dir or f'examples/docsite/{args.version}'} at http://{host}:{port}/ "
        "(sitemap: /sitemap.xml)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
