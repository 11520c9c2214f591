"""Per-page CPU work in worker processes: extraction, fingerprints and chunks, off the crawl's GIL.

Scrapy's downloads, recrawler's middlewares and pipelines and the database writes share one
interpreter lock, so per-page CPU work done in the crawl's process (parsing, rendering, token
normalising, hashing, chunking) waits its turn behind them however many cores the machine has,
threads or not. With ``RECRAWLER_CPU_PROCESSES`` worker processes, a page is handed over once:
its body goes out, its content, fingerprints and (when the page needs them) chunks come back.
The pages of one turn of the event loop go as one task: one wake-up of the pool's threads and one
pickle for all of them. At most two tasks per worker are out at once; pages that come meanwhile
wait and go together (up to ``_BATCH``) as soon as one comes back, so under load a hand-over's
cost is shared by many pages (each hand-over waits for the crawl's interpreter lock several
times), and an idle worker still gets a lone page at once.
When the run publishes, the workers also embed batches of its new chunk texts (hashing embedder).
The work itself is :func:`process_page`, pure and the same in every mode: without workers (or
once they are gone) the crawl's process runs it, on a CPU thread or on the reactor, and the Page
carries the same result either way.

The workers are forked when the spider opens, before the run's own threads start: a fork never
runs the user's script again, as a spawned worker would without an ``if __name__ ==
"__main__"`` guard. Signals are left to the crawl's process, which shuts the workers down when
the engine stops. A worker that dies (killed, out of memory) is one ERROR line; the run goes
on with the work done in its own process.
"""

from __future__ import annotations

from recrawler.cpu.jobs import EncodingOf, PageJob, PageWork, Worked, chunk_settings, process_page
from recrawler.cpu.pool import CpuPool, usable_cores, worker_processes

__all__ = [
    "CpuPool",
    "EncodingOf",
    "PageJob",
    "PageWork",
    "Worked",
    "chunk_settings",
    "process_page",
    "usable_cores",
    "worker_processes",
]
