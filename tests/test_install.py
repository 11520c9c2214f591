"""docs/install.md, followed: recrawler installed without the registry, from a checkout, a built wheel
and a git URL, into a fresh virtualenv; each copy crawls and searches the bundled site and writes a
report (its migrations and templates came with it). pgvector's source is the one .ci/run builds.

The virtualenv sees this environment's packages (recrawler's dependencies) through a path file and
installs with ``--no-index``: nothing is fetched, and only recrawler itself is installed. Its
editable copy in this environment is not on that path (path files there are not read).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest_mockserver import REPO_ROOT

GUIDE = (REPO_ROOT / "docs" / "install.md").read_text(encoding="utf-8")
#: what the tests copy of the checkout to build from (a built tree left behind is not the checkout's)
IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", ".scrapy", ".venv")


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def clean_env() -> dict[str, str]:
    """The environment without this checkout on the path: the installed copy must stand alone."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "RECRAWLER_DB_URI", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")
    }


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A fresh virtualenv without pip or setuptools of its own, seeing this one's packages."""
    target = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(target)], tmp_path).check_returncode()
    python = target / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
    (Path(purelib.stdout.strip()) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return target


def pip_install(venv: Path, requirement: str, cwd: Path) -> None:
    """``pip install REQUIREMENT`` into *venv*, offline (this environment's pip and setuptools)."""
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-index",
            "--no-build-isolation",
            requirement,
        ],
        cwd,
        clean_env(),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def checkout_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "recrawler"
    shutil.copytree(REPO_ROOT, copy, ignore=IGNORE, symlinks=True)
    return copy


def uses_the_installed_copy(venv: Path, work: Path) -> None:
    """The installed recrawler, alone: its command, a crawl of the bundled site, a search, a report."""
    python, recrawler = venv / "bin" / "python", venv / "bin" / "recrawler"
    env = clean_env()
    where = run([str(python), "-c", "import recrawler; print(recrawler.__file__)"], work, env)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr
    assert run([str(recrawler), "--version"], work, env).returncode == 0
    server = subprocess.Popen(
        [str(python), str(REPO_ROOT / "examples" / "serve.py"), "--port", "0"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = server.stdout.readline().split(" at ", 1)[1].split()[0]
        db = f"sqlite:///{work / 'docs.db'}"
        crawled = run([str(recrawler), "crawl", "--db", db, f"{base}sitemap.xml"], work, env)
        assert crawled.returncode == 0, crawled.stderr[-3000:]
        assert "crawled: 6 new: 6 changed: 0 unchanged: 0 gone: 0 errors: 0" in crawled.stderr
    finally:
        server.terminate()
        server.communicate(timeout=10)
    found = run([str(recrawler), "search", "--db", db, "how do I retry failed uploads?"], work, env)
    assert found.returncode == 0, found.stderr
    assert "configuration.html#retries" in found.stdout
    report = run([str(recrawler), "report", "--db", db, "-o", str(work / "run.html")], work, env)
    assert report.returncode == 0, report.stderr
    assert (work / "run.html").read_text(encoding="utf-8").lstrip().startswith("<!DOCTYPE html>")


@pytest.mark.timeout(300)
def test_from_a_checkout(tmp_path: Path, venv: Path) -> None:
    assert "pip install -e '.[postgres]'" in GUIDE
    copy = checkout_copy(tmp_path)
    pip_install(venv, f"{copy}[postgres]", tmp_path)
    uses_the_installed_copy(venv, tmp_path)


@pytest.mark.timeout(300)
def test_from_a_built_wheel(tmp_path: Path, venv: Path) -> None:
    # the guide's offline build, word for word, in a copy of the checkout
    command = "pip wheel --no-deps --no-build-isolation -w dist ."
    assert command in GUIDE
    assert "python -m build --wheel" in GUIDE
    copy = checkout_copy(tmp_path)
    built = run([sys.executable, "-m", *command.split()], copy, clean_env())
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (copy / "dist").glob("recrawler-*-py3-none-any.whl")
    assert f'pip install "recrawler[postgres] @ file:///path/to/dist/{wheel.name}"' in GUIDE
    pip_install(venv, f"recrawler[postgres] @ {wheel.as_uri()}", tmp_path)
    uses_the_installed_copy(venv, tmp_path)


@pytest.mark.timeout(300)
def test_from_a_git_url(tmp_path: Path, venv: Path) -> None:
    # the guide shows the https form; a file URL to a clone of this checkout is the same for pip
    assert re.search(r'pip install "recrawler\[postgres\] @ git\+https://\S+\.git@v\d', GUIDE)
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    copy = checkout_copy(tmp_path)
    shutil.move(copy, repo)
    env = {**clean_env(), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        assert run(["git", *argv], repo, env).returncode == 0
    pip_install(venv, f"recrawler[postgres] @ git+{repo.as_uri()}", tmp_path)
    uses_the_installed_copy(venv, tmp_path)


def test_pgvector_is_built_from_the_source_ci_builds() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    version = re.search(r"^pgvector_version=(\S+)$", ci, re.MULTILINE)
    digest = re.search(r"^pgvector_sha256=(\S+)$", ci, re.MULTILINE)
    assert version is not None
    assert digest is not None
    assert "pool/main/p/pgvector/pgvector_$pgvector_version.orig.tar.gz" in ci
    assert f"pool/main/p/pgvector/pgvector_{version[1]}.orig.tar.gz" in GUIDE
    assert f"{digest[1]}  pgvector_{version[1]}.orig.tar.gz" in GUIDE
    assert f"--branch v{version[1]}" in GUIDE
    assert 'make OPTFLAGS="" PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config install' in GUIDE
    # the packages the tests need, as .ci/run installs them
    for package in re.findall(r"need\+=\(([^)]*)\)", ci):
        for name in package.split():
            assert name in GUIDE, name
