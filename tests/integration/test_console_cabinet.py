"""The cabinet and Audit Logs as people use them (issue 34), in a real browser: times in the
browser's zone with the zone named and the pickers read in it, a layout usable at 390×844, the
favicon, and connections' health with a "Test" that lists the tools and calls one. The same
gateway, issuer, tool server and chromium as test_console_browser.py (its fixture)."""

from __future__ import annotations

import datetime
import re
from zoneinfo import ZoneInfo

import httpx
from playwright.sync_api import Page, expect

from tests.integration.test_console_browser import Console, confirming, console, signed_in  # noqa: F401 -- `console` is the fixture
from tests.integration.test_console_editor import SHOUT, csrf_of, made, node, open_editor
from tests.support import canary
from tests.support.browser import screenshot
from tests.support.node_servers import free_port
from tests.support.waiting import wait_until

NEW_YORK = "America/New_York"


def fits(page: Page, selector: str, width: int) -> None:
    """The element is inside the viewport's width (reachable without scrolling the page sideways)."""
    box = page.locator(selector).first.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)


def test_audit_times_are_shown_in_the_browsers_zone_named_and_a_rows_own_time_as_since_or_until_finds_it(console: Console) -> None:
    # R: C9, C4 -- a New York browser: the rows, the zone and the pickers all say New York time
    alice, page, violations = signed_in(console, "alice", timezone_id=NEW_YORK)
    made(console, alice, page)
    assert wait_until(lambda: len(alice.request.get(console.url + "/audit").json()["data"]) == 2)
    newest = alice.request.get(console.url + "/audit").json()["data"][0]
    shown = datetime.datetime.fromtimestamp(newest["ts"], ZoneInfo(NEW_YORK)).strftime("%Y-%m-%d %H:%M:%S")
    page.click("a:has-text('Audit Logs')")
    rows = page.locator("[data-testid=audit] tbody tr")
    expect(rows).to_have_count(2)
    expect(page.get_by_test_id("zone")).to_have_text(f"Times are in your browser's zone, {NEW_YORK}.")
    expect(page.locator("[data-testid=audit] th").first).to_have_text(f"time ({NEW_YORK})")
    expect(page.get_by_text(f"since ({NEW_YORK})")).to_be_visible()
    expect(rows.first.locator("td").first).to_have_text(shown)
    # a second after the newest row's own shown time finds nothing; that time, typed into since, finds it
    at = datetime.datetime.strptime(shown, "%Y-%m-%d %H:%M:%S")
    picked = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731 -- the picker's value
    newest_row = page.locator(f'[data-testid=audit] tbody tr[data-seq="{newest["seq"]}"]')
    page.fill("input[name=since]", picked(at + datetime.timedelta(seconds=1)))
    page.click("button:has-text('Filter')")
    expect(page.get_by_text("No records.")).to_be_visible()
    page.fill("input[name=since]", picked(at))
    page.click("button:has-text('Filter')")
    expect(newest_row).to_have_count(1)
    # and as until: a second earlier leaves it out, its own time takes it in (the whole of its second)
    page.fill("input[name=since]", "")
    page.fill("input[name=until]", picked(at - datetime.timedelta(seconds=1)))
    page.click("button:has-text('Filter')")
    expect(newest_row).to_have_count(0)
    page.fill("input[name=until]", picked(at))
    page.click("button:has-text('Filter')")
    expect(newest_row).to_have_count(1)
    assert violations == []
    alice.close()


def test_the_cabinet_audit_logs_and_editor_are_usable_at_390_by_844(console: Console) -> None:
    # R: C9 -- a phone-sized window: nothing needs a sideways scroll of the page; tables scroll in place
    alice, page, violations = signed_in(console, "alice", viewport={"width": 390, "height": 844})
    page.fill("input[name=connection-id]", "tools")
    page.fill("input[name=connection-endpoint]", console.tools_url + "/mcp")
    page.fill("input[name=connection-header]", canary.CONNECTION_HEADER)
    page.fill("input[name=connection-secret]", canary.CONNECTION_TOKEN)
    fits(page, "button:has-text('Add connection')", 390)
    page.click("button:has-text('Add connection')")
    expect(page.locator('[data-testid=connections] tr[data-id="tools"]')).to_be_visible()
    page.fill("input[name=bridge-id]", "pipes")
    page.check("input[name=bridge-conn-tools]")
    page.click("button:has-text('Add bridge')")
    expect(page.locator('[data-testid=bridges] tr[data-id="pipes"]')).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    for selector in ("input[name=connection-endpoint]", "button:has-text('Add bridge')", "header.topbar a:has-text('Audit Logs')"):
        fits(page, selector, 390)
    screenshot(page, "narrow-connections")

    page.click("a:has-text('Audit Logs')")
    expect(page.locator("[data-testid=audit] tbody tr")).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    for selector in ("input[name=action]", "input[name=since]", "button:has-text('Filter')"):
        fits(page, selector, 390)
    page.fill("input[name=action]", "bridge.create")
    page.click("button:has-text('Filter')")
    expect(page.locator("[data-testid=audit] tbody tr")).to_have_count(1)

    made_graph = alice.request.put(console.url + "/bridges/pipes/graph", headers={"x-csrf-token": csrf_of(page)}, data=SHOUT)
    assert made_graph.ok
    open_editor(page, console)
    for shown in ("in1", "t1", "out1"):  # the graph fitted into the narrow canvas
        expect(node(page, shown)).to_be_in_viewport()
    canvas = page.get_by_test_id("canvas").bounding_box()
    assert canvas is not None and canvas["width"] >= 350 and canvas["height"] >= 300  # readable, not 49 px wide
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    fits(page, "button:has-text('Save')", 390)
    screenshot(page, "narrow-editor")
    assert violations == []
    alice.close()


def test_the_console_serves_a_favicon_so_no_page_logs_a_404(console: Console) -> None:
    # R: C9
    alice, page, violations = signed_in(console, "alice")
    expect(page.locator("link[rel=icon]")).to_have_attribute("href", "/console/assets/favicon.svg")
    icon = httpx.get(console.url + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml" and icon.text.startswith("<svg")
    assert alice.request.get(console.url + "/console/assets/favicon.svg").status == 200
    page.click("a:has-text('Audit Logs')")
    expect(page.get_by_role("heading", name="Audit Logs")).to_be_visible()
    assert violations == []  # signed_in's listener: no favicon 404, no CSP report, no app error
    alice.close()


def test_a_connections_health_is_shown_and_test_lists_its_tools_and_calls_one(console: Console) -> None:
    # R: C8, C9 (confirm before delete)
    alice, page, violations = signed_in(console, "alice")
    headers = {"x-csrf-token": csrf_of(page)}
    made(console, alice, page)
    closed = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    assert alice.request.post(console.url + "/connections", headers=headers, data={"id": "down", "endpoint": closed}).status == 201
    page.reload()
    row = page.locator('[data-testid=connections] tr[data-id="tools"]')
    row.get_by_role("button", name="Test").click()
    panel = page.get_by_test_id("connection-test")
    expect(panel.get_by_test_id("test-outcome")).to_contain_text("Reachable in")
    expect(panel.get_by_test_id("test-tools")).to_contain_text("echo")
    page.select_option("select[name=test-tool]", "echo")
    page.fill("textarea[name=test-arguments]", '{"text": "hi there"}')
    panel.get_by_role("button", name="Call").click()
    expect(panel.get_by_test_id("test-result")).to_contain_text("hi there")
    expect(row.locator("td.health")).to_contain_text("ok")
    screenshot(page, "connection-test")

    down = page.locator('[data-testid=connections] tr[data-id="down"]')
    down.get_by_role("button", name="Test").click()
    expect(panel.get_by_test_id("test-outcome")).to_contain_text("Failed:")
    expect(down.locator("td.health")).to_contain_text("failing:")

    # a bridge over the failing connection: its tool node is greyed in the editor, and a save
    # (the connection cannot be asked for its tools) goes through with a warning on the node
    assert alice.request.post(console.url + "/bridges", headers=headers, data={"id": "viadown", "connections": ["down"]}).status == 201
    page.goto(console.url + "/console#/bridges/viadown")
    page.click("button:has-text('+ tool')")
    expect(node(page, "t1").locator(".bridge-node")).to_have_class(re.compile(r"\bbroken\b"))
    expect(node(page, "t1").locator(".broken-note")).to_contain_text("connection down is failing:")
    expect(page.get_by_test_id("inspector").get_by_role("alert").first).to_contain_text("connection down is failing:")
    expect(page.locator("select[name=tool] option").first).to_have_text("(its tools could not be listed)")
    page.fill("input[name=tool-name]", "echo")  # named by hand
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_contain_text("Saved, with warnings:")
    expect(node(page, "t1").locator(".warning")).not_to_have_count(0)
    page.goto(console.url + "/console#/connections")

    # deleting a bridge asks first, naming it and its endpoint (C9)
    bridge = page.locator('[data-testid=bridges] tr[data-id="pipes"]')
    with confirming(page, accept=False) as asked:
        bridge.get_by_role("button", name="Delete").click()
    assert asked == ["Delete bridge pipes (alice) and its graph? Its MCP endpoint /mcp/pipes goes away."]
    expect(bridge).to_have_count(1)
    with confirming(page):
        bridge.get_by_role("button", name="Delete").click()
    expect(bridge).to_have_count(0)
    assert alice.request.get(console.url + "/bridges/pipes").status == 404
    assert violations == []
    alice.close()
