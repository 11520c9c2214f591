"""What the benchmark scripts share.

- ``sites``: the generated docs site (pages, sitemap.xml with lastmods, robots.txt);
- ``nginx``: a throwaway nginx on loopback with a parseable access log;
- ``runners``: a crawl or the ``recrawler`` CLI in a subprocess, with wall time, peak RSS and
  what the server sent it;
- ``results``: progress lines, tables, ratios and their formatting, and the JSON each script writes
  (``--json PATH``, default ``benchmarks/results/<script>.json``);
- ``<benchmark>_*`` (``detect_``, ``index_``, ``scale_``, ``search_``, ``vector_``): one benchmark's
  parts, which its script runs and the scripts measured beside it reuse (``scale_servers``,
  ``scale_fill``).
"""
