"""Page keys (recrawler.urls) and the ``recrawler normalize`` command that prints them."""

from __future__ import annotations

import io

import pytest

from recrawler import default_settings
from recrawler.cli import main as cli_main
from recrawler.urls import KeyMaker, UrlPolicy, key_host, origin_url, page_key, url_origin


@pytest.mark.parametrize(
    ("variants", "key"),
    [
        # scheme and a leading www. are folded, the host is lowercased
        (
            ["http://example.com/a", "https://example.com/a", "https://www.example.com/a"],
            "example.com/a",
        ),
        (["https://WWW.Example.COM/a", "HTTPS://EXAMPLE.com/a"], "example.com/a"),
        # default ports are dropped, for their own scheme only
        (["http://example.com:80/a", "https://example.com:443/a"], "example.com/a"),
        # fragment and trailing slash
        (
            ["https://example.com/a#intro", "https://example.com/a/", "https://example.com/a/#x"],
            "example.com/a",
        ),
        (
            ["https://example.com", "https://example.com/", "https://example.com/#top"],
            "example.com",
        ),
        # tracking parameters
        (
            [
                "https://example.com/a?utm_source=news&utm_medium=mail",
                "https://example.com/a?gclid=123",
                "https://example.com/a?fbclid=abc&UTM_Campaign=x",
            ],
            "example.com/a",
        ),
        # other parameters are kept and sorted, tracking ones dropped around them
        (
            ["https://example.com/a?b=2&a=1", "https://example.com/a?a=1&utm_source=x&b=2&gclid=9"],
            "example.com/a?a=1&b=2",
        ),
        # percent-encoding is consistent, in the path and in the query
        (["https://example.com/a b", "https://example.com/a%20b"], "example.com/a%20b"),
        (
            [
                "https://example.com/café",
                "https://example.com/caf%C3%A9",
                "https://example.com/caf%c3%a9",
            ],
            "example.com/caf%C3%A9",
        ),
        (
            [
                "https://example.com/s?q=a b",
                "https://example.com/s?q=a%20b",
                "https://example.com/s?q=a+b",
            ],
            "example.com/s?q=a+b",
        ),
        (["https://example.com/~user", "https://example.com/%7Euser"], "example.com/~user"),
    ],
)
def test_variants_share_one_key(variants: list[str], key: str) -> None:
    assert {page_key(url) for url in variants} == {key}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://example.com/Docs", "https://example.com/docs"),  # path case is kept
        ("http://example.com:8080/a", "http://example.com/a"),  # a non-default port is kept
        ("http://example.com:443/a", "https://example.com/a"),  # 443 is only https' default
        ("https://example.com/a?page=1", "https://example.com/a?page=2"),
        ("https://example.com/a?page=1", "https://example.com/a"),
        ("https://docs.example.com/a", "https://example.com/a"),  # only www. is folded
        ("https://www2.example.com/a", "https://example.com/a"),
        ("https://example.com/a%2Fb", "https://example.com/a/b"),  # an encoded slash is data
    ],
)
def test_different_pages_keep_different_keys(a: str, b: str) -> None:
    assert page_key(a) != page_key(b)


def test_key_shape() -> None:
    assert (
        page_key("http://Example.com:8080/Guide/Intro/?b=2&a=1#s") == "example.com:8080/Guide/Intro?a=1&b=2"
    )
    assert page_key("  https://example.com/a  ") == "example.com/a"


def test_keep_params_mode_keeps_only_listed_patterns() -> None:
    km = KeyMaker(keep_params=["page", "v*"])
    url = "https://example.com/a?sort=x&page=2&version=3&utm_source=y&gclid=1"
    assert km(url) == "example.com/a?page=2&version=3"
    # patterns match case-insensitively, like the drop list
    assert km("https://example.com/a?PAGE=2&Sort=1") == "example.com/a?PAGE=2"
    assert km("https://example.com/a?sort=x") == "example.com/a"


def test_keep_list_wins_over_drop_list() -> None:
    km = KeyMaker(drop_params=["page"], keep_params=["page"])
    assert km("https://example.com/a?page=2&x=1") == "example.com/a?page=2"


def test_custom_drop_list_replaces_the_default() -> None:
    km = KeyMaker(["session*", "ref"])
    assert km("https://example.com/a?sessionid=abc&ref=tw&b=1") == "example.com/a?b=1"
    # utm_* is no longer in the list, so it is kept
    assert km("https://example.com/a?utm_source=x") == "example.com/a?utm_source=x"


def test_default_key_maker_uses_the_default_setting() -> None:
    url = "https://example.com/a?mc_cid=1&_ga=2&msclkid=3&q=1"
    assert page_key(url) == KeyMaker(default_settings.RECRAWLER_URL_DROP_PARAMS)(url) == "example.com/a?q=1"


@pytest.mark.parametrize(
    ("key", "host"),
    [
        ("example.com/a/b", "example.com"),
        ("example.com:8080/a", "example.com:8080"),
        ("example.com?a=1", "example.com"),
        ("example.com", "example.com"),
        (page_key("https://www.Example.com:8443/x?y=1"), "example.com:8443"),
    ],
)
def test_key_host(key: str, host: str) -> None:
    assert key_host(key) == host


def test_ipv6_literal_keeps_its_brackets() -> None:
    key = page_key("http://[::1]:8080/x")
    assert key == "[::1]:8080/x"
    assert key_host(key) == "[::1]:8080"
    # without brackets these two would share the key "::1:8080/x"
    assert key != page_key("http://[::1:8080]/x")
    assert page_key("http://[::1]/x") == page_key("https://[::1]:443/x") == "[::1]/x"


def normalize(*args: str) -> list[list[str]]:
    out = io.StringIO()
    assert cli_main(["normalize", *args], out=out) == 0
    return [line.split("\t") for line in out.getvalue().splitlines()]


def test_cli_normalize_prints_key_and_url_per_line() -> None:
    urls = ["https://www.example.com/guide/?utm_source=news#intro", "http://example.com/guide"]
    assert normalize(*urls) == [["example.com/guide", urls[0]], ["example.com/guide", urls[1]]]


def test_cli_normalize_drop_replaces_the_default_list() -> None:
    url = "https://example.com/a?ref=tw&utm_source=x&b=1"
    assert normalize(url) == [["example.com/a?b=1&ref=tw", url]]
    assert normalize("--drop", "ref", url) == [["example.com/a?b=1&utm_source=x", url]]
    assert normalize("--drop", "ref", "--drop", "utm_*", url) == [["example.com/a?b=1", url]]


def test_cli_normalize_keep() -> None:
    url = "https://example.com/a?ref=1&page=2&lang=en&x=1"
    assert normalize("--keep", "page", "--keep", "lang", url) == [["example.com/a?lang=en&page=2", url]]


def test_cli_normalize_needs_a_url() -> None:
    with pytest.raises(SystemExit) as exc_info:
        cli_main(["normalize"], out=io.StringIO())
    assert exc_info.value.code == 2


def test_a_policy_remembers_a_bounded_number_of_decisions() -> None:
    """A listed URL is checked again before its download: the second check is a lookup, the
    decision the same, and the memory bounded however many URLs a site lists."""
    policy = UrlPolicy.for_urls(["https://docs.example.com/sitemap.xml"])
    urls = [f"https://docs.example.com/p{i}" for i in range(5000)]
    for _ in range(2):
        assert [policy.refusal(u) for u in urls] == [None] * 5000
        assert policy.refusal("https://elsewhere.example.com/p") == "offsite"
        assert policy.refusal("ftp://docs.example.com/p") == "scheme"
        assert policy.refusal(None) == "malformed"  # type: ignore[arg-type]
        assert len(policy._decided) <= 4096


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Docs.Example.com/a", ("https", "docs.example.com", 443)),
        ("http://docs.example.com:80/a", ("http", "docs.example.com", 80)),
        ("https://docs.example.com:8443/a", ("https", "docs.example.com", 8443)),
        # nothing is folded: www. and each port are origins of their own
        ("https://www.docs.example.com/a", ("https", "www.docs.example.com", 443)),
        ("http://[::1]:8080/a", ("http", "::1", 8080)),
        ("ftp://docs.example.com/a", None),
        ("https:///a", None),
        ("http://docs.example.com:99999/a", None),
    ],
)
def test_url_origin(url: str, origin: tuple[str, str, int] | None) -> None:
    assert url_origin(url) == origin
    if origin is not None:
        assert url_origin(origin_url(origin) + "/x") == origin


def test_a_policys_origins_are_its_sitemaps_and_its_extra_hosts_under_their_schemes() -> None:
    policy = UrlPolicy.for_urls(
        ["https://docs.example.com/sitemap.xml"], ["api.example.com:8443", "cdn.example"]
    )
    assert policy.origins == {
        ("https", "docs.example.com", 443),
        ("https", "api.example.com", 8443),
        ("https", "cdn.example", 443),
    }
    # a page on the same host over http is the site's page, but not its origin: no credentials
    assert policy.allows("http://docs.example.com/a")
    assert url_origin("http://docs.example.com/a") not in policy.origins
    # "*" widens the pages, never the origins
    assert UrlPolicy.for_urls(["http://127.0.0.1:8000/s.xml"], any_host=True).origins == {
        ("http", "127.0.0.1", 8000)
    }
    # no URL to take a scheme from (a user spider's allowed_domains): both
    assert UrlPolicy.for_urls([], ["docs.example.com"]).origins == {
        ("http", "docs.example.com", 80),
        ("https", "docs.example.com", 443),
    }


def test_a_spiders_policy_is_its_site_domains_and_start_urls_or_the_hosts_it_starts_from() -> None:
    named = UrlPolicy.for_site("docs.example.com", ["api.example.com"], ["https://docs.example.com/"])
    assert named.hosts == {"docs.example.com", "api.example.com"}
    assert not named.from_start
    assert named.refusal("https://elsewhere.example.com/a") == "offsite"
    # a spider naming nothing: nothing is allowed until it starts somewhere
    learning = UrlPolicy.for_site(None, [], [])
    assert learning.from_start
    assert learning.refusal("https://docs.example.com/a") == "offsite"
    learning.start("ftp://docs.example.com/")  # teaches nothing
    learning.start("https://docs.example.com/start")
    assert learning.refusal("https://docs.example.com/a") is None
    assert learning.refusal("https://elsewhere.example.com/a") == "offsite"
    assert learning.origins == {("https", "docs.example.com", 443)}
    # a policy that names its hosts learns nothing from where it starts
    named.start("https://elsewhere.example.com/")
    assert named.refusal("https://elsewhere.example.com/a") == "offsite"


def test_clean_url_drops_what_the_key_drops_and_keeps_the_rest() -> None:
    km = KeyMaker()
    assert (
        km.clean_url("https://Docs.Example.com/p2.html?utm_source=newsletter")
        == "https://Docs.Example.com/p2.html"
    )
    assert km.clean_url("https://d.example/p?b=2&utm_medium=x&a=1#top") == "https://d.example/p?b=2&a=1"
    assert km.clean_url("https://d.example/p?a=1&fbclid=x") == "https://d.example/p?a=1"
    assert km.clean_url("https://d.example/p?page=2") == "https://d.example/p?page=2"
    assert (
        KeyMaker(keep_params=["page"]).clean_url("https://d.example/p?page=2&x=1")
        == "https://d.example/p?page=2"
    )
