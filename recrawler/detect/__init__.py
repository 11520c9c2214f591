"""Change detection, pure (no Scrapy): the verdict, volatile tokens, the critical-token guard,
the noise model, hashing and the rendered-text format. ``ClassifyPipeline`` asks :func:`decide`.
"""

from __future__ import annotations

from recrawler.detect.noise import Fingerprint, SiteNoise, fingerprint
from recrawler.detect.verdict import Verdict, decide

__all__ = ["Fingerprint", "SiteNoise", "Verdict", "decide", "fingerprint"]
