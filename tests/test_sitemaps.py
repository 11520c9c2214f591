"""Sitemap lastmod values in every W3C datetime form; missing, malformed and future ones are unknown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from recrawler.sitemaps import known_lastmod, parse_lastmod, parse_lastmod_start

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "latest"),
    [
        ("2026", datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2026-02", datetime(2026, 2, 28, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2024-02", datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2026-01-02", datetime(2026, 1, 2, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2026-01-02T10:30Z", datetime(2026, 1, 2, 10, 30, 59, 999999, tzinfo=UTC)),
        ("2026-01-02T10:30:15Z", datetime(2026, 1, 2, 10, 30, 15, tzinfo=UTC)),
        ("2026-01-02T10:30:15.45+01:00", datetime(2026, 1, 2, 9, 30, 15, 450000, tzinfo=UTC)),
        ("2026-01-02T10:30:15-05:00", datetime(2026, 1, 2, 15, 30, 15, tzinfo=UTC)),
        ("2026-01-02T10:30:15+0100", datetime(2026, 1, 2, 9, 30, 15, tzinfo=UTC)),
        ("2026-01-02T10:30:15", datetime(2026, 1, 2, 10, 30, 15, tzinfo=UTC)),  # no zone: UTC
        (" 2026-01-02 ", datetime(2026, 1, 2, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
)
def test_every_w3c_form_is_read_as_its_latest_instant(value: str, latest: datetime) -> None:
    assert parse_lastmod(value) == latest


@pytest.mark.parametrize(
    "value", [None, "", "yesterday", "2026-13-01", "2026-02-30", "2026-01-02T25:00Z", "26-01-02"]
)
def test_malformed_lastmod_is_unknown(value: str | None) -> None:
    assert parse_lastmod(value) is None
    assert known_lastmod(value, NOW) is None


def test_start_of_a_reduced_precision() -> None:
    assert parse_lastmod_start("2026-03") == datetime(2026, 3, 1, tzinfo=UTC)
    assert parse_lastmod_start("2026-03-01T12:00Z") == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_future_lastmod_is_unknown_but_today_is_known() -> None:
    assert known_lastmod("2026-03-02", NOW) is None
    assert known_lastmod("2026-03-01T12:01:00Z", NOW) is None
    # today, date only: its start is in the past, so it is known (and covers the whole day)
    assert known_lastmod("2026-03-01", NOW) == datetime(2026, 3, 1, 23, 59, 59, 999999, tzinfo=UTC)
    assert known_lastmod("2026-03", NOW) is not None
    assert known_lastmod("2026-02-28T08:00:00Z", NOW) == datetime(2026, 2, 28, 8, tzinfo=UTC)
