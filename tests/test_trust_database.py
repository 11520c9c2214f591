"""The database on a bad day: damaged on disk, empty, deleted or made unwritable mid-run, an embedder
that fails. Never written to when damaged, never "success" when nothing was saved."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.exceptions import SchemaVersionError
from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT
from tests.embedserver import EmbedServer, Reply

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 150


def write_site(site: Site, n: int = PAGES) -> str:
    for i in range(n):
        text = f"Page {i} explains how widget {i} retries its uploads after {i} seconds."
        site.write(f"p{i}.html", docsite.page(f"P{i}", [("Overview", [text])]), mtime=T0)
    return site.write_sitemap([f"p{i}.html" for i in range(n)])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def integrity(db: Path) -> list[str]:
    try:
        return [str(r[0]) for r in statedb.rows(db, "PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]


def flip_index(db: Path, n: int = 64) -> None:
    """Flip *n* bytes at the start of the cell content of the largest index's root page (its keys
    and child pointers): the file opens and its schema reads, but ``PRAGMA integrity_check`` fails."""
    page_size = statedb.value(db, "PRAGMA page_size")
    roots = [r[0] for r in statedb.rows(db, "SELECT rootpage FROM sqlite_master WHERE type = 'index'")]
    data = bytearray(db.read_bytes())

    def cells(root: int) -> int:
        page = (root - 1) * page_size
        return int.from_bytes(data[page + 3 : page + 5], "big")

    root = max(roots, key=cells)
    page = (root - 1) * page_size
    content = int.from_bytes(data[page + 5 : page + 7], "big") or 65536
    for i in range(page + content, page + content + n):
        data[i] ^= 0xFF
    db.write_bytes(bytes(data))


def replace_in_file(db: Path, old: bytes, new: bytes) -> int:
    """Overwrite every occurrence of *old* in the file's bytes with *new* (same length)."""
    assert len(old) == len(new)
    data = db.read_bytes()
    count = data.count(old)
    db.write_bytes(data.replace(old, new))
    return count


# --- item 8: a damaged database ------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_database_that_fails_its_integrity_check_is_refused_untouched(
    site: Site, crawls: Crawls
) -> None:
    sitemap = write_site(site)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == PAGES
    assert not crawls.db_path.with_name("state.db-wal").exists()  # closed and checkpointed
    flip_index(crawls.db_path)
    assert integrity(crawls.db_path) != ["ok"]
    before = sha(crawls.db_path)
    r2 = await crawls.crawl(sitemap)
    assert r2.exit_code == 5
    assert r2.finish_reason == "recrawler_state_error"
    assert isinstance(r2.failure, SchemaVersionError)
    assert "integrity_check" in str(r2.failure)
    assert sha(crawls.db_path) == before
    # recrawler check names it, and --repair writes nothing to a damaged file
    code, out = await shell.acli("check", "--db", crawls.db_uri, "--json")
    assert code == 1
    assert {json.loads(line)["check"] for line in out.splitlines()} == {"integrity"}
    code, out = await shell.acli("check", "--db", crawls.db_uri, "--repair")
    assert code == 1
    assert "restore it from a backup" in out
    assert sha(crawls.db_path) == before
    # the read-only commands refuse it too, in one line: never a traceback, never an answer
    for argv in (["chunks"], ["pages"], ["search", "widget retries"]):
        code, _ = await shell.acli(*argv, "--db", crawls.db_uri)
        assert code == 2, argv
    assert sha(crawls.db_path) == before


@deferred_f_from_coro_f
async def test_check_finds_chunk_text_that_no_longer_matches_its_hash(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    sitemap = write_site(site)
    await crawls.crawl(sitemap)
    assert await shell.acli("check", "--db", crawls.db_uri) == (0, "ok: every invariant holds\n")
    # one chunk's text changed on disk (still UTF-8), another's no longer decodes
    assert replace_in_file(crawls.db_path, b"widget 17 retries", b"widget 71 retries") == 1
    assert replace_in_file(crawls.db_path, b"widget 42 retries", b"widget 42 retr\xffes") == 1
    assert integrity(crawls.db_path) == ["ok"]  # SQLite does not check what a row says
    code, out = await shell.acli("check", "--db", crawls.db_uri, "--json")
    assert code == 1
    found = [json.loads(line) for line in out.splitlines()]
    assert sorted((f["check"], f["key"].rsplit("/", 1)[-1]) for f in found) == [
        ("chunk_hash", "p17.html"),
        ("chunk_hash", "p42.html"),
    ]
    capsys.readouterr()
    code, _ = await shell.acli("chunks", "--db", crawls.db_uri)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("recrawler: error: ")
    assert err.count("\n") == 1
    # --repair queues both pages for a full fetch; the next run indexes them again
    assert (await shell.acli("check", "--db", crawls.db_uri, "--repair"))[0] == 0
    r = await crawls.crawl(sitemap)
    assert r.exit_code == 0
    assert await shell.acli("check", "--db", crawls.db_uri) == (0, "ok: every invariant holds\n")
    code, out = await shell.acli("chunks", "--db", crawls.db_uri, "--json")
    assert code == 0
    assert sum("widget 42 retries" in json.loads(line)["text"] for line in out.splitlines()) == 1


# --- "also seen": a 0-byte database ------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_zero_byte_database_is_refused_by_the_crawl_as_by_every_command(
    site: Site, crawls: Crawls
) -> None:
    sitemap = write_site(site, 20)
    crawls.db_path.touch()
    r = await crawls.crawl(sitemap)
    assert r.exit_code == 5
    assert isinstance(r.failure, SchemaVersionError)
    assert "empty (0-byte)" in str(r.failure)
    assert crawls.db_path.stat().st_size == 0
    assert sorted(p.name for p in crawls.tmp_path.iterdir() if p.name.startswith("state.db")) == ["state.db"]
    assert (await shell.acli("pages", "--db", crawls.db_uri))[0] == 2
    # no file at all: the crawl creates its database
    crawls.db_path.unlink()
    assert (await crawls.crawl(sitemap)).counts["new"] == 20


# --- item 9: success reported when nothing was saved --------------------------------------------


@pytest.fixture
def embed_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=16) as server:
        yield server


@pytest.mark.parametrize("failure", ["401", "down"])
@deferred_f_from_coro_f
async def test_a_run_the_embedder_leaves_unpublished_does_not_exit_0(
    site: Site, crawls: Crawls, embed_server: EmbedServer, failure: str
) -> None:
    sitemap = write_site(site, 60)
    settings: dict[str, Any] = {
        "RECRAWLER_EMBEDDER": "openai:test-model",
        "RECRAWLER_EMBEDDER_BASE_URL": embed_server.url,
        "RECRAWLER_EMBEDDER_API_KEY": "sk-test-0123456789",
        "RECRAWLER_EMBEDDER_MAX_RETRIES": 0,
        "RECRAWLER_CPU_EMBED": False,
    }
    r1 = await crawls.crawl(sitemap, **settings)
    assert (r1.report["index"]["state"], r1.exit_code) == ("published", 0)
    site.write("p3.html", docsite.page("P3", [("Overview", ["Page 3 now retries twice."])]), mtime=T0 + 60)
    if failure == "401":
        embed_server.script(Reply(401, body={"error": {"message": "Incorrect API key"}}))
    else:
        settings["RECRAWLER_EMBEDDER_BASE_URL"] = "http://127.0.0.1:9/v1"
    r2 = await crawls.crawl(sitemap, **settings)
    assert r2.report["index"]["state"] == "unpublished"
    assert r2.exit_code == 4
    assert r2.report["outcome"]["exit_code"] == 4
    assert "unpublished" in r2.report["outcome"]["reasons"]
    stored = statedb.value(crawls.db_path, "SELECT exit_code FROM runs WHERE id = ?", (r2.report["run_id"],))
    assert stored == 4


MIDRUN = """
import re, subprocess, sys, shutil
from pathlib import Path
sitemap, db, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
cmd = [sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap}",
       "-s", f"RECRAWLER_DB_URI=sqlite:///{db}", "-s", "LOG_LEVEL=INFO", "-s", "RECRAWLER_SCHEDULE=all",
       "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=4", "-s", "CONCURRENT_REQUESTS=4", "-s", "LOGSTATS_INTERVAL=0.5"]
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
# mid-run: the crawl's own progress line says 200 of the 2000 pages were crawled (EOF: it ended)
said = []
for line in proc.stderr:
    said.append(line)
    crawled = re.search(r"Crawled (\\d+) pages", line)
    if crawled and int(crawled.group(1)) >= 200:
        break
files = [str(db), str(db) + "-wal", str(db) + "-shm"]
if mode == "immutable":
    subprocess.run(["chattr", "+i", *files], check=True)
else:
    shutil.rmtree(db.parent)
try:
    _, rest = proc.communicate(timeout=240)
    err = "".join(said) + rest
finally:
    if mode == "immutable":
        subprocess.run(["chattr", "-i", *files], check=False)
print(proc.returncode)
print(err)
"""


def chattr_works(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.touch()
    try:
        ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False).returncode == 0
    except FileNotFoundError:
        return False
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
    probe.unlink()
    return ok


@pytest.mark.parametrize("mode", ["immutable", "deleted"])
def test_a_database_made_unwritable_or_deleted_mid_run_exits_5(site: Site, tmp_path: Path, mode: str) -> None:
    if mode == "immutable" and not chattr_works(tmp_path):
        pytest.skip("chattr +i is not permitted here (needs root on a file system that supports it)")
    sitemap = write_site(site, 2000)
    db = tmp_path / "data" / "state.db"
    db.parent.mkdir()
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", MIDRUN, sitemap, str(db), mode],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    code, _, err = out.partition("\n")
    assert int(code) == 5, err[-3000:]
    why = "can no longer be written" if mode == "immutable" else "was deleted during the run"
    assert f"{why} during the run" in err or why in err
    assert "Traceback" not in err
    assert time.monotonic() - started < 240
