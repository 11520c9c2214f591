"""Processes a benchmark measures: crawls and ``recrawler`` commands, with wall time and peak RSS."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from benchmarks.lib.nginx import AccessLogEntry, NginxServer


def compile_sources(*paths: Path) -> None:
    """Write the bytecode of *paths* (packages or files), as installing a package does: a timed
    process then loads it, whatever ``PYTHONDONTWRITEBYTECODE`` says, instead of compiling the
    source on every start (Scrapy and the other installed packages have theirs already)."""
    import compileall
    import py_compile

    for path in paths:
        if path.is_dir():
            compileall.compile_dir(str(path), quiet=1)
        else:
            py_compile.compile(str(path), doraise=True)


# Settings whose values decide throughput; runs A and B should agree on all of them.
THROUGHPUT_KEYS = (
    "CONCURRENT_REQUESTS",
    "CONCURRENT_REQUESTS_PER_DOMAIN",
    "CONCURRENT_REQUESTS_PER_IP",
    "CONCURRENT_ITEMS",
    "DOWNLOAD_DELAY",
    "RANDOMIZE_DOWNLOAD_DELAY",
    "AUTOTHROTTLE_ENABLED",
    "HTTPCACHE_ENABLED",
    "ROBOTSTXT_OBEY",
    "LOG_LEVEL",
    "TELNETCONSOLE_ENABLED",
    "TWISTED_REACTOR",
)


@dataclass(slots=True)
class RunResult:
    """What one crawl process cost and what the server sent it."""

    name: str
    label: str
    command: list[str]
    log_file: str
    returncode: int = 0
    timed_out: bool = False
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    #: user + system CPU seconds of the crawl process (all its threads)
    cpu_s: float = 0.0
    requests: int = 0
    pages: int = 0
    status_200: int = 0
    status_304: int = 0
    status_other: int = 0
    body_bytes: int = 0
    page_body_bytes: int = 0
    bytes_sent: int = 0
    conditional_requests: int = 0
    finish_reason: str | None = None
    elapsed_time_seconds: float | None = None
    summary_line: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    #: the machine's 1-minute load average when the process started and when it ended
    load_start: float | None = None
    load_end: float | None = None

    @property
    def ok(self) -> bool:
        """The process exited 0 within the timeout."""
        return self.returncode == 0 and not self.timed_out

    @property
    def pages_per_s(self) -> float:
        """Page requests answered per second of wall time."""
        return self.pages / self.wall_s if self.wall_s else 0.0


def run_process(
    cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, timeout: float
) -> tuple[int, bool, float, int]:
    """Run cmd, output to log_path; return (exit code, timed out, wall s, peak RSS KiB).

    os.wait4 reaps the child and gives its own rusage, so ru_maxrss is this crawl's peak
    (KiB on Linux) with no extra tools and no mixing with earlier runs.
    """
    with log_path.open("wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        # Reaped by wait4: tell Popen so it neither waits again nor warns.
        proc.returncode = os.waitstatus_to_exitcode(status)
    _LAST_CPU[0] = usage.ru_utime + usage.ru_stime
    return proc.returncode, timed_out.is_set(), wall, usage.ru_maxrss


#: CPU seconds (user + system) of the last process run_process reaped
_LAST_CPU = [0.0]


_STAT_FINISH = re.compile(r"'finish_reason': '([^']*)'")
_STAT_ELAPSED = re.compile(r"'elapsed_time_seconds': ([0-9.]+)")
_OVERRIDDEN = re.compile(r"Overridden settings:\s*\n?(\{.*?\})\s*\n(?=\d{4}-\d\d-\d\d |\Z)", re.S)


def parse_log(text: str, result: RunResult) -> None:
    """Fill finish reason, Scrapy's elapsed time, summary line and throughput settings."""
    if m := _STAT_FINISH.search(text):
        result.finish_reason = m.group(1)
    if m := _STAT_ELAPSED.search(text):
        result.elapsed_time_seconds = float(m.group(1))
    summaries = [line for line in text.splitlines() if "crawled:" in line]
    if summaries:
        result.summary_line = summaries[-1].strip()
    if m := _OVERRIDDEN.search(text):
        block = m.group(1)
        for key in THROUGHPUT_KEYS:
            if km := re.search(rf"'{key}': ('[^']*'|[^,}}\n]+)", block):
                result.settings[key] = km.group(1).strip().strip("'")


def count_requests(entries: Sequence[AccessLogEntry], page_paths: set[str], r: RunResult) -> None:
    """Count what nginx served during one run."""
    for e in entries:
        r.requests += 1
        r.body_bytes += e.body_bytes_sent
        r.bytes_sent += e.bytes_sent
        if e.status == 200:
            r.status_200 += 1
        elif e.status == 304:
            r.status_304 += 1
        else:
            r.status_other += 1
        if e.if_none_match or e.if_modified_since:
            r.conditional_requests += 1
        if urlsplit(e.uri).path in page_paths:
            r.pages += 1
            r.page_body_bytes += e.body_bytes_sent


def crawl(
    name: str,
    label: str,
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    workdir: Path,
    server: NginxServer,
    page_paths: set[str],
    timeout: float,
) -> RunResult:
    """Run one crawl with a fresh access log and measure it."""
    log_path = workdir / f"run_{name}.log"
    result = RunResult(name=name, label=label, command=cmd, log_file=str(log_path))
    server.truncate_access_log()
    print(f"run {name}: {label} ...", file=sys.stderr, flush=True)
    result.load_start = os.getloadavg()[0]
    rc, timed_out, wall, maxrss_kib = run_process(cmd, cwd=cwd, env=env, log_path=log_path, timeout=timeout)
    result.load_end = os.getloadavg()[0]
    result.returncode, result.timed_out, result.wall_s = rc, timed_out, wall
    result.peak_rss_mib = maxrss_kib / 1024
    result.cpu_s = _LAST_CPU[0]
    count_requests(server.read_access_log(), page_paths, result)
    parse_log(log_path.read_text(encoding="utf-8", errors="replace"), result)
    if not result.ok:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
        why = "timed out" if timed_out else f"exited {rc}"
        print(f"run {name} {why}; last log lines ({log_path}):\n{tail}", file=sys.stderr)
    return result


def format_table(runs: Sequence[RunResult]) -> str:
    """The side-by-side table of all runs."""
    header = (
        "run",
        "pages",
        "requests",
        "200s",
        "304s",
        "other",
        "body bytes",
        "wall s",
        "crawl s",
        "cpu s",
        "pages/s",
        "peak RSS MiB",
        "load",
        "exit",
    )
    rows = [header]
    rows.extend(
        (
            f"{r.name} {r.label}",
            str(r.pages),
            str(r.requests),
            str(r.status_200),
            str(r.status_304),
            str(r.status_other),
            f"{r.body_bytes:,}",
            f"{r.wall_s:.2f}",
            "-" if r.elapsed_time_seconds is None else f"{r.elapsed_time_seconds:.2f}",
            f"{r.cpu_s:.2f}",
            f"{r.pages_per_s:.0f}",
            f"{r.peak_rss_mib:.1f}",
            format_load(r.load_start, r.load_end),
            "timeout" if r.timed_out else str(r.returncode),
        )
        for r in runs
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_load(start: float | None, end: float | None) -> str:
    """The 1-minute load average at a process's start and end: ``1.9-3.2``."""
    if start is None or end is None:
        return "-"
    return f"{start:.1f}-{end:.1f}"


def recrawler_cli() -> list[str]:
    """The ``recrawler`` console script of this interpreter (no pyenv shim), else ``python -m``."""
    script = Path(sys.executable).parent / "recrawler"
    if script.exists():
        return [str(script)]
    found = shutil.which("recrawler")
    return [found] if found else [sys.executable, "-m", "recrawler.cli"]


def scrapy_env(*, keep_recrawler: bool = True) -> dict[str, str]:
    """Our environment without Scrapy project overrides (and, if asked, without ``RECRAWLER_*``)."""
    drop = ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")
    return {
        k: v
        for k, v in os.environ.items()
        if k not in drop and (keep_recrawler or not k.startswith("RECRAWLER_"))
    }


def peak_rss_bytes() -> int:
    """This process's peak RSS (``ru_maxrss``; on Linux it carries the parent's RSS over ``exec``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def proc_status_mib(field_name: str) -> float | None:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of this process from /proc, in MiB (Linux only)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def git_state(project_dir: Path) -> tuple[str, int] | None:
    """The checkout's short commit and how many paths under ``recrawler/`` are uncommitted, or None."""
    git = ["git", "-C", str(project_dir)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "recrawler"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return head.stdout.strip(), len(dirty.stdout.splitlines())


@contextlib.contextmanager
def workdir(prefix: str, *, keep: bool, log: Callable[[str], None]) -> Iterator[Path]:
    """A temporary directory, removed afterwards unless *keep* (then *log* says where it is)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if keep:
            log(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)
