"""Offline demo: serve a small docs site on localhost, crawl it four times while it changes.

    python examples/demo.py [--db demo.db]

Run 1 finds every page new; run 2 finds nothing changed (304s); then version 2 of the site is
deployed (a renamed setting, a new changelog, a removed page) and run 3 reports exactly that;
run 4 confirms the removed page is gone.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = HERE / "docsite"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def write_sitemap(root: Path, base: str) -> str:
    urls = "".join(f"<url><loc>{base}/{p.name}</loc></url>\n" for p in sorted(root.glob("*.html")))
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{urls}</urlset>\n'
    )
    return f"{base}/sitemap.xml"


def deploy_v2(root: Path) -> None:
    """Copy only files whose bytes changed (as an rsync deploy would); drop removed pages."""
    for src in (SITE / "v2").glob("*.html"):
        dst = root / src.name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy(src, dst)  # a deploy writes new files: new mtimes
    for old in root.glob("*.html"):
        if not (SITE / "v2" / old.name).exists():
            old.unlink()


def crawl(db: str, sitemap: str, label: str) -> None:
    proc = subprocess.run(  # noqa: S603 (fixed argv)
        # a forced full pass each run: runs seconds apart would otherwise find nothing due yet
        [sys.executable, "-m", "recrawler.cli", "crawl", "--db", db, sitemap, "-s", "RECRAWLER_SCHEDULE=all"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stderr.splitlines() if "crawled:" in line]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"crawl failed ({label})")
    print(f"{label:<34} {lines[-1].split('] INFO: ', 1)[-1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="state database path (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recrawler-demo-") as tmp:
        root = Path(tmp) / "site"
        shutil.copytree(SITE / "v1", root, copy_function=shutil.copy)
        db = f"sqlite:///{Path(args.db).resolve() if args.db else Path(tmp) / 'demo.db'}"
        handler = functools.partial(QuietHandler, directory=str(root))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            sitemap = write_sitemap(root, base)
            print(f"serving examples/docsite/v1 at {base}, state in {db}\n")
            crawl(db, sitemap, "run 1 (first crawl):")
            crawl(db, sitemap, "run 2 (nothing changed):")
            deploy_v2(root)
            write_sitemap(root, base)
            crawl(db, sitemap, "run 3 (v2 deployed):")
            crawl(db, sitemap, "run 4 (removed page confirmed):")
            print()
            subprocess.run([sys.executable, "-m", "recrawler.cli", "pages", "--db", db], check=True)  # noqa: S603
        finally:
            server.shutdown()


if __name__ == "__main__":
    main()
