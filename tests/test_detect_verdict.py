"""The verdict for one page (recrawler.detect.verdict): every path of decide, and pure deletions."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from recrawler.detect.boilerplate import deleted_runs, is_pure_deletion
from recrawler.detect.hashing import block_hash, content_hash, pack_blocks
from recrawler.detect.noise import SiteNoise, fingerprint
from recrawler.detect.tokens import Normalizer
from recrawler.detect.verdict import (
    BY_FUZZY,
    BY_HASH,
    NOT_MODIFIED,
    REBASELINED,
    RESTORED,
    Verdict,
    decide,
)
from recrawler.items import Page, PageStatus

SITE = "docs.example.com"
NOISE = SiteNoise.build(SITE, Normalizer())
# the same site once a volatile region has been learned: another noise key
LEARNED = SiteNoise.build(SITE, Normalizer(), regions=["div.related"])

TEXT = """# Uploads

The client uploads files in parts of 8 MB. Each part is retried 3 times before the upload fails.

## Retries

Retries use exponential backoff, starting at 500 ms and doubling each time. Set max_retries to change \
the number of attempts, or pass --max-retries on the command line.

## Limits

Uploads must not exceed 512 MB. Larger files are split into parts before they are sent. Contact \
support if you see an error that is not listed here.

Last updated: 2026-03-01"""
CODE = ("max_retries", "--max-retries")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored:
    """A page's stored state, as decide reads it."""

    status: str = "live"
    content_hash: str | None = None
    fuzzy_hash: str | None = None
    noise_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fields:
    """A page's stored field record, as decide reads it."""

    text: str
    code: tuple[str, ...] = CODE
    blocks: bytes = b""


def page(text: str | None = TEXT, *, http_status: int = 200, region_hits: int = 0) -> Page:
    return Page(
        url=f"https://{SITE}/uploads",
        key=f"{SITE}/uploads",
        http_status=http_status,
        text=text,
        code=CODE,
        content_hash=content_hash(text) if text else None,
        region_hits=region_hits,
    )


def stored(text: str = TEXT, noise: SiteNoise = NOISE, **kw: str | None) -> tuple[Stored, Fields]:
    """What the store holds after *text* was stored under *noise*."""
    fp = fingerprint(text, noise)
    rec = Stored(content_hash=fp.content_hash, fuzzy_hash=fp.fuzzy_hash, noise_key=noise.key)
    return replace(rec, **kw), Fields(text=text, blocks=pack_blocks(fp.blocks))


def judge(
    new: Page,
    rec: Stored | None,
    old: Fields | None,
    *,
    noise: SiteNoise = NOISE,
    threshold: int | None = None,
) -> Verdict:
    fp = fingerprint(new.text, noise) if new.text is not None and new.http_status != 304 else None
    return decide(new, rec, fp, None if fp is None else noise, old, threshold=threshold)


def test_no_record_is_new() -> None:
    assert judge(page(), None, None).status == PageStatus.NEW


def test_not_modified_is_unchanged_without_a_body() -> None:
    rec, old = stored()
    verdict = judge(page(None, http_status=304), rec, old)
    assert (verdict.status, verdict.how) == (PageStatus.UNCHANGED, NOT_MODIFIED)


@pytest.mark.parametrize("status", ["gone", "moved"])
def test_a_removed_page_back_as_it_was_is_restored_otherwise_new(status: str) -> None:
    rec, old = stored(status=status)
    assert judge(page(), rec, old).how == RESTORED
    assert judge(page(), rec, old).status == PageStatus.UNCHANGED
    edited = page(TEXT.replace("8 MB", "16 MB"))
    assert judge(edited, rec, old).status == PageStatus.NEW


def test_same_normalised_text_is_unchanged_by_hash() -> None:
    rec, old = stored()
    # only the volatile date moved
    verdict = judge(page(TEXT.replace("2026-03-01", "2026-04-02")), rec, old)
    assert (verdict.status, verdict.how, verdict.advance) == (PageStatus.UNCHANGED, BY_HASH, False)


def test_same_hash_under_a_new_noise_model_advances_the_baseline() -> None:
    rec, old = stored()
    verdict = judge(page(), rec, old, noise=LEARNED)
    assert (verdict.how, verdict.advance) == (BY_HASH, True)


def test_a_page_stored_before_block_hashing_compares_its_cleaned_text() -> None:
    rec = Stored(content_hash=content_hash(TEXT), noise_key=None)
    assert judge(page(), rec, None).how == BY_HASH
    assert judge(page(TEXT + "\n\nMore."), rec, None).status == PageStatus.CHANGED


@pytest.mark.parametrize("empty", ["", "   \n\n  "])
def test_empty_content_is_never_unchanged(empty: str) -> None:
    rec, old = stored(empty or " ")
    assert rec.content_hash == fingerprint(empty, NOISE).content_hash  # the hashes even agree
    verdict = judge(page(empty), rec, old, threshold=1_000)
    assert verdict.status == PageStatus.CHANGED
    removed, _ = stored(empty or " ", status="gone")
    assert judge(page(empty), removed, None).status == PageStatus.NEW


def test_an_edit_is_changed_by_default() -> None:
    rec, old = stored()
    verdict = judge(page(TEXT.replace("doubling", "tripling")), rec, old)
    assert verdict.status == PageStatus.CHANGED
    assert verdict.distance is not None
    assert verdict.advance


def test_a_small_rewording_within_the_fuzzy_threshold_is_unchanged() -> None:
    rec, old = stored()
    typo = page(TEXT.replace("Contact support", "Please contact support"))
    verdict = judge(typo, rec, old, threshold=100)
    assert (verdict.status, verdict.how, verdict.critical) == (PageStatus.UNCHANGED, BY_FUZZY, [])
    assert verdict.distance is not None
    assert verdict.distance <= 100
    # the old baseline stays, so small drifts add up and get caught
    assert not verdict.advance
    assert judge(typo, rec, old, threshold=verdict.distance - 1).status == PageStatus.CHANGED


@pytest.mark.parametrize(
    ("old_text", "new_text", "reason"),
    [
        ("Set max_retries to change", "Set retry_limit to change", "identifier: -max_retries +retry_limit"),
        ("exceed 512 MB", "exceed 256 MB", "number: '512 MB' -> '256 MB'"),
        ("Uploads must not exceed", "Uploads must exceed", "negation: -not"),
    ],
)
def test_the_guard_trips_on_a_critical_edit_inside_the_fuzzy_threshold(
    old_text: str, new_text: str, reason: str
) -> None:
    rec, old = stored()
    verdict = judge(page(TEXT.replace(old_text, new_text)), rec, old, threshold=200)
    assert verdict.distance is not None
    assert verdict.distance <= 200  # a fuzzy match on its own
    assert verdict.status == PageStatus.CHANGED
    assert reason in verdict.critical
    assert verdict.guarded


def test_volatile_tokens_do_not_trip_the_guard() -> None:
    rec, old = stored()
    # the date is noise to the guard too, and the rewording is no critical edit
    edited = TEXT.replace("2026-03-01", "2026-05-05").replace("Contact support", "Please contact support")
    verdict = judge(page(edited), rec, old, threshold=200)
    assert (verdict.status, verdict.critical) == (PageStatus.UNCHANGED, [])


def test_text_too_short_for_tlsh_falls_back_to_exact() -> None:
    rec, old = stored("Short page.")
    verdict = judge(page("Short page!"), rec, old, threshold=1_000)
    assert (verdict.status, verdict.distance) == (PageStatus.CHANGED, None)
    assert not verdict.guarded


# --- pure deletions: noise a newly learned region removes is no change ----------------------------

WIDGET = TEXT.replace("## Limits", "Related: Pricing, Quotas\n\n## Limits")


def test_blocks_cut_by_a_new_region_rebaseline() -> None:
    rec, old = stored(WIDGET)
    verdict = judge(page(TEXT, region_hits=1), rec, old, noise=LEARNED)
    assert (verdict.status, verdict.how, verdict.advance) == (PageStatus.UNCHANGED, REBASELINED, True)


def test_a_deletion_is_a_change_when_the_noise_model_did_not_move() -> None:
    rec, old = stored(WIDGET)
    assert judge(page(TEXT, region_hits=1), rec, old).status == PageStatus.CHANGED


def test_more_cuts_than_region_hits_is_a_change() -> None:
    rec, old = stored(WIDGET)
    # the widget went, and so did a paragraph elsewhere: two places, one region hit
    cut = TEXT.replace("\n\nUploads must not exceed", "\n\nXUploads must not exceed").split("\n\nX")[0]
    assert judge(page(cut, region_hits=1), rec, old, noise=LEARNED).status == PageStatus.CHANGED
    assert judge(page(cut, region_hits=2), rec, old, noise=LEARNED).how == REBASELINED


GLUED = TEXT.replace("Retries use exponential", "| zlib | 1.3.1-11.3-8 |\n\nRetries use exponential")
SPACED = GLUED.replace("1.3.1-11.3-8", "1.3.1-1 1.3-8")


def test_a_text_spaced_out_by_a_new_text_format_rebaselines_and_is_indexed_again() -> None:
    # stored by a version that glued a cell's lines; the noise key moved with the text format
    rec, old = stored(GLUED)
    verdict = judge(page(SPACED), rec, old, noise=LEARNED)
    assert (verdict.status, verdict.how, verdict.advance, verdict.reindex) == (
        PageStatus.UNCHANGED,
        REBASELINED,
        True,
        True,
    )
    # under the same noise key, a whitespace edit is the site's own: a change
    assert judge(page(SPACED), rec, old).status == PageStatus.CHANGED
    # and a new key does not hide a real edit next to the spacing
    edited = SPACED.replace("1.3-8", "1.3-9")
    assert judge(page(edited), rec, old, noise=LEARNED).status == PageStatus.CHANGED


def test_a_deletion_with_something_added_is_a_change() -> None:
    rec, old = stored(WIDGET)
    added = TEXT + "\n\nA new paragraph."
    assert judge(page(added, region_hits=1), rec, old, noise=LEARNED).status == PageStatus.CHANGED


B = {name: block_hash(name) for name in "abcdexyz"}


def hashes(names: str) -> list[int]:
    return [B[n] for n in names]


@pytest.mark.parametrize(
    ("old", "new", "pure", "runs"),
    [
        ("abcde", "abde", True, 1),
        ("abcde", "ae", True, 1),
        ("abcde", "bd", True, 3),
        ("abcde", "", True, 1),
        ("abcde", "abcde", False, 0),
        ("abcde", "abxde", False, 1),
        ("abcde", "abdc", False, 2),
        ("abc", "abcx", False, 0),
    ],
)
def test_pure_deletion(old: str, new: str, pure: bool, runs: int) -> None:
    assert is_pure_deletion(hashes(old), hashes(new)) is pure
    assert deleted_runs(hashes(old), hashes(new)) == runs
