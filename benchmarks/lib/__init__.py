"""What the benchmark scripts share.

- ``sites``: the generated docs site (pages, sitemap.xml with lastmods, robots.txt);
- ``nginx``: a throwaway nginx on loopback with a parseable access log;
- ``runners``: a crawl or the ``recrawler`` CLI in a subprocess, with wall time, peak RSS and
  what the server sent it;
- ``results``: ratios and their formatting, and the JSON each script writes (``--json PATH``,
  default ``benchmarks/results/<script>.json``).
"""
