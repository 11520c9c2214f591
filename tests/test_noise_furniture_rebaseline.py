"""Re-baselining after a learned region, when the cut blocks sat next to a run of shared blocks."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

from recrawler.detect.boilerplate import EDGE
from recrawler.detect.hashing import block_hash, pack_blocks
from recrawler.detect.noise import fingerprint
from recrawler.detect.verdict import REBASELINED, Verdict, decide
from recrawler.items import Page, PageStatus
from recrawler.learning import NoiseRegistry
from recrawler.state import FieldsRow
from tests.state_sqlite import SITE, rec

# --- re-baselining after a learned region, when the cut blocks sat next to a shared run ---------

STORED = "# Guide 7\n\nLU\n\nED\n\nRID\n\n17 people are reading this page\n\n## Overview\n\nOwn words.\n\n"
STORED += "More own words.\n\n### Related\n\n- Launch post\n\n- Pricing"
# the same page once p.presence and div.related > ul are learned regions (2 elements cut)
CUT = "# Guide 7\n\nLU\n\nED\n\nRID\n\n## Overview\n\nOwn words.\n\nMore own words.\n\n### Related"
# learned by now: a meta run on every page, followed by "## Overview" once the presence line is
# gone, and "### Related" closing every page once its rotating list is gone
LEARNED = frozenset(
    pairwise([block_hash("LU"), block_hash("ED"), block_hash("RID"), block_hash("## Overview")])
) | {(block_hash("### Related"), EDGE)}


def verdict(stored: str, text: str, region_hits: int) -> Verdict:
    noise = dataclasses.replace(NoiseRegistry().site(SITE), boilerplate=LEARNED)
    old_fp = fingerprint(stored, noise)
    old = FieldsRow(title="", headings=[], code=[], links=[], text=stored, blocks=pack_blocks(old_fp.blocks))
    page = Page(url=f"https://{SITE}/g", key=f"{SITE}/g", http_status=200, text=text, region_hits=region_hits)
    stored_rec = rec("g", content_hash=old_fp.content_hash, noise_key="before the regions")
    return decide(page, stored_rec, fingerprint(text, noise), noise, old, threshold=None)


def test_noise_cut_next_to_a_shared_run_is_rebaselined() -> None:
    assert verdict(STORED, CUT, region_hits=2).how == REBASELINED
    # a paragraph gone as well, or more places cut than the regions account for: a change
    assert verdict(STORED, CUT.replace("\n\nOwn words.", ""), region_hits=2).status == PageStatus.CHANGED
    assert verdict(STORED, CUT, region_hits=1).status == PageStatus.CHANGED
