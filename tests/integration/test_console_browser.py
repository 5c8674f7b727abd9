"""The console end to end in a real browser (C1–C4): Debian's chromium driven by Playwright against
the real gateway, a Python-SDK MCP tool server as the connection, and the MCP SDK client on
`/mcp/<bridgeId>`. Screenshots of each view: `TOOLGATE_CONSOLE_SCREENSHOTS=docs/console`."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support import canary
from tests.support.bridge_servers import CallLog, mcp_http, tool_server
from tests.support.browser import chromium, screenshot
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.node_servers import free_port
from tests.support.oidc import CONSOLE_SECRET_ENV, OidcProvider, console_client, oauth_section, sign_in_in_browser
from tests.support.upstream import ScriptedUpstream
from tests.support.waiting import wait_until


@dataclass
class Console:
    url: str
    tools_url: str
    browser: Browser
    issuer: OidcProvider


@pytest.fixture
def console(upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """The gateway signs the console in through a real issuer (oidc-provider: alice of org acme,
    bob of org globex); alice's API key still serves her MCP client on /mcp/<bridgeId>."""
    (tmp_path / "seal.key").write_text(secrets.token_urlsafe(32))
    port, client_secret = free_port(), secrets.token_urlsafe(24)
    monkeypatch.setenv(CONSOLE_SECRET_ENV, client_secret)
    with serve(tool_server(CallLog(), delay=0.0, required_header=(canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN))) as tools, \
            OidcProvider(clients=[console_client(port, client_secret)]) as issuer:
        config = simple_config(
            upstream.url,
            auth={"mode": "api_keys", "api_keys": [
                {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme", "email": "alice@acme.test"},
            ], "oauth": oauth_section(issuer.issuer, port)},
            bridge={"enabled": True, "database": str(tmp_path / "bridge.db"), "apiEndpointAllowPrivate": ["127.0.0.0/8"],
                    "secretKey": "file:seal.key"},
        )
        with running_gateway(config, tmp_path, port=port) as gw, chromium() as browser:
            expect.set_options(timeout=20_000)  # a deadline, not a pause: 2 shared cores can be slow
            yield Console(gw.url, tools.url, browser, issuer)


def signed_in(console: Console, user: str, shot: str | None = None, **options: Any) -> tuple[BrowserContext, Page, list[str]]:
    """A new browser context (its own cookies; `options` for Playwright's new_context, e.g. a
    viewport or a timezone_id) signed in as `user` through the issuer; the list collects CSP
    reports, uncaught errors of the app and a favicon 404."""
    context = console.browser.new_context(**{"viewport": {"width": 1440, "height": 900}, **options})
    page = context.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: violations.append(f"page error: {e}"))  # an uncaught error in the app
    page.on("console", lambda m: violations.append(f"console error: {m.text}")
            if m.type == "error" and "Content Security" not in m.text and "Failed to load resource" not in m.text else None)
    page.on("response", lambda r: violations.append(f"{r.status} {r.url}") if r.status == 404 and "favicon" in r.url else None)
    if shot:
        page.goto(console.url + "/console")
        screenshot(page, shot)
    sign_in_in_browser(page, console.url, console.issuer, user)
    expect(page.get_by_role("heading", name="Connections")).to_be_visible()
    return context, page, violations


def node(page: Page, node_id: str) -> Any:
    return page.locator(f'.react-flow__node[data-id="{node_id}"]')


def draw_edge(page: Page, source: str, source_port: str, target: str, target_port: str) -> None:
    """Drag from an output port to an input port, as a user does."""
    start = node(page, source).locator(f'.react-flow__handle[data-handleid="out:{source_port}"]').bounding_box()
    end = node(page, target).locator(f'.react-flow__handle[data-handleid="in:{target_port}"]').bounding_box()
    assert start is not None and end is not None
    page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
    page.mouse.down()
    page.mouse.move(end["x"] + end["width"] / 2, end["y"] + end["height"] / 2, steps=12)
    page.mouse.up()


def add_node(page: Page, kind: str, node_id: str) -> None:
    page.click(f"button:has-text('+ {kind}')")
    expect(node(page, node_id)).to_be_visible()


def choose_tool(page: Page, node_id: str, tool: str) -> None:
    node(page, node_id).click()
    page.select_option("select[name=connection]", "tools")
    expect(page.locator(f"select[name=tool] option[value='{tool}']")).to_have_count(1)
    page.select_option("select[name=tool]", tool)


@contextmanager
def confirming(page: Page, accept: bool = True) -> Iterator[list[str]]:
    """Around an action that asks confirm(): answer it (accept or cancel); the list holds its
    message once the block ends (which waits for the dialog)."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", answer)
    with page.expect_event("dialog"):
        yield asked


def audit_count(context: BrowserContext, url: str, **filters: str) -> int:
    answer = context.request.get(url + "/audit", params=filters)
    assert answer.ok
    return len(answer.json()["data"])


async def call_over_mcp(url: str, name: str, arguments: dict[str, Any]) -> Any:
    async with Client(streamable_http_client(url, http_client=mcp_http("alice-key"))) as client:
        return await client.call_tool(name, arguments)


def test_a_user_builds_saves_runs_and_audits_a_pipeline_in_the_console_and_another_account_sees_none_of_it(console: Console) -> None:
    # R: C1, C2, C3, C4, C9 (confirm before delete)
    alice, page, violations = signed_in(console, "alice", shot="signin")

    # C2: a connection to the test MCP server, its credential written once, and a bridge over it
    page.fill("input[name=connection-id]", "tools")
    page.fill("input[name=connection-endpoint]", console.tools_url + "/mcp")
    page.fill("input[name=connection-header]", canary.CONNECTION_HEADER)
    page.fill("input[name=connection-secret]", canary.CONNECTION_TOKEN)
    page.click("button:has-text('Add connection')")
    row = page.locator('[data-testid=connections] tr[data-id="tools"]')
    expect(row).to_contain_text(console.tools_url)
    expect(row).to_contain_text(f"{canary.CONNECTION_HEADER}: (set, never shown)")
    expect(page.locator("input[name=connection-secret]")).to_have_value("")
    assert canary.CONNECTION_TOKEN not in page.content()
    page.fill("input[name=bridge-id]", "pipes")
    page.check("input[name=bridge-conn-tools]")
    page.click("button:has-text('Add bridge')")
    expect(page.locator('[data-testid=bridges] tr[data-id="pipes"]')).to_contain_text("tools")
    expect(page.locator("select[name=connection-owner] option")).to_have_text(["alice", "org:acme"])  # the account and its org

    # edit and delete: a second connection renamed (prefix), added to the bridge and taken out, deleted
    page.fill("input[name=connection-id]", "spare")
    page.fill("input[name=connection-endpoint]", console.tools_url + "/mcp")
    page.click("button:has-text('Add connection')")
    spare = page.locator('[data-testid=connections] tr[data-id="spare"]')
    spare.get_by_role("button", name="Edit").click()
    expect(page.locator("input[name=connection-id]")).to_be_disabled()
    page.fill("input[name=connection-prefix]", "sp")
    page.click("button:has-text('Save connection')")
    expect(spare.locator("td").nth(3)).to_have_text("sp")
    bridge_row = page.locator('[data-testid=bridges] tr[data-id="pipes"]')
    bridge_row.get_by_role("button", name="Edit").click()
    page.check("input[name=bridge-conn-spare]")
    page.click("button:has-text('Save bridge')")
    expect(bridge_row.locator("td").nth(2)).to_have_text("tools, spare")
    bridge_row.get_by_role("button", name="Edit").click()
    page.uncheck("input[name=bridge-conn-spare]")
    page.click("button:has-text('Save bridge')")
    expect(bridge_row.locator("td").nth(2)).to_have_text("tools")
    with confirming(page, accept=False) as asked:  # C9: a delete is confirmed first; cancelled, nothing goes
        spare.get_by_role("button", name="Delete").click()
    assert asked == ["Delete connection spare (alice)? Bridges that use it stop reaching its tools."]
    expect(spare).to_have_count(1)
    with confirming(page):
        spare.get_by_role("button", name="Delete").click()
    expect(spare).to_have_count(0)
    screenshot(page, "connections")

    # C3: draw input -> echo -> output; the input's port is renamed in the inspector
    page.locator('[data-testid=bridges] tr[data-id="pipes"]').get_by_text("Edit graph").click()
    expect(page.get_by_text("Bridge pipes")).to_be_visible()
    add_node(page, "input", "in1")
    page.fill("input[name=new-arguments]", "text")
    page.click("button:has-text('Add port')")
    page.click("button[aria-label='remove port query']")
    expect(node(page, "in1").locator('[data-handleid="out:text"]')).to_have_count(1)
    expect(node(page, "in1").locator('[data-handleid="out:query"]')).to_have_count(0)
    add_node(page, "tool", "t1")
    choose_tool(page, "t1", "echo")
    expect(node(page, "t1").locator('[data-handleid="in:text"]')).to_have_count(1)  # ports from the input schema
    expect(node(page, "t1").locator('[data-handleid="in:prefix"]')).to_have_count(1)
    add_node(page, "output", "out1")
    add_node(page, "tool", "t2")
    choose_tool(page, "t2", "echo")
    draw_edge(page, "in1", "text", "t1", "text")
    draw_edge(page, "t1", "result", "out1", "result")
    draw_edge(page, "t1", "result", "t2", "text")
    expect(page.locator(".react-flow__edge")).to_have_count(3)
    draw_edge(page, "t2", "result", "t1", "prefix")  # t1 -> t2 -> t1: refused while drawing
    expect(page.get_by_role("status")).to_contain_text("would close a cycle")
    expect(page.locator(".react-flow__edge")).to_have_count(3)

    # a bad graph: a tool whose name breaks the pattern is shown on its node, and nothing is saved
    add_node(page, "tool", "t3")
    choose_tool(page, "t3", "weird.tool/v2")
    page.click("button:has-text('Add pipeline')")
    page.fill("input[name=pipeline-name-0]", "shout")
    page.click("button:has-text('Save')")
    expect(node(page, "t3").locator(".problem")).to_contain_text("tool name must match")
    expect(page.get_by_role("status")).to_contain_text("Not saved")
    assert alice.request.get(console.url + "/bridges/pipes/graph").json()["nodes"] == []
    screenshot(page, "editor-problem")

    node(page, "t3").click()
    page.click("button:has-text('Delete node')")
    moved = node(page, "t2").locator(".title").bounding_box()  # the user drags t2 down, out of the row
    assert moved is not None
    page.mouse.move(moved["x"] + 20, moved["y"] + 8)
    page.mouse.down()
    page.mouse.move(moved["x"] + 20, moved["y"] + 188, steps=8)
    page.mouse.up()
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    saved = alice.request.get(console.url + "/bridges/pipes/graph").json()
    assert {n["id"] for n in saved["nodes"]} == {"in1", "t1", "t2", "out1"}
    assert [(e["from"], e["to"]) for e in saved["edges"]] == [
        ({"node": "in1", "port": "text"}, {"node": "t1", "port": "text"}),
        ({"node": "t1", "port": "result"}, {"node": "out1", "port": "result"}),
        ({"node": "t1", "port": "result"}, {"node": "t2", "port": "text"}),
    ]
    assert saved["pipelines"] == [{"id": "p1", "name": "shout", "inputNode": "in1", "outputNode": "out1"}]
    at = {n["id"]: n["position"] for n in saved["nodes"]}
    assert at["t2"]["y"] - at["t1"]["y"] > 100 and at["t2"]["x"] == 750  # moved down where it was dropped

    # positions are kept: after a reload each node stands where the graph says
    page.reload()
    for saved_node in saved["nodes"]:
        x, y = saved_node["position"]["x"], saved_node["position"]["y"]
        expect(node(page, saved_node["id"])).to_have_css("transform", f"matrix(1, 0, 0, 1, {x}, {y})")

    # the pipeline tried from the editor: its result, then its failure naming the node
    page.fill("textarea[name=try-arguments]", '{"text": "hi from the editor"}')
    page.click("button:has-text('Run')")
    expect(page.get_by_test_id("try-result")).to_contain_text('"result": "hi from the editor"')
    screenshot(page, "editor")
    page.fill("textarea[name=try-arguments]", "{}")
    page.click("button:has-text('Run')")
    expect(page.get_by_test_id("try-result")).to_contain_text("node t1 (echo) failed")

    # the same pipeline through /mcp/<bridgeId> with the MCP SDK client
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API holds this thread's event loop
        result = thread.submit(asyncio.run, call_over_mcp(console.url + "/mcp/pipes", "shout", {"text": "hi over MCP"})).result()
    assert not result.is_error and result.structured_content == {"result": "hi over MCP"}

    # C4: both calls in Audit Logs, newest first, filtered
    assert wait_until(lambda: audit_count(alice, console.url, action="mcp.pipeline_call") == 3)
    page.click("a:has-text('Audit Logs')")
    expect(page.get_by_role("heading", name="Audit Logs")).to_be_visible()
    rows = page.locator("[data-testid=audit] tbody tr")
    expect(rows.first).to_contain_text("mcp.pipeline_call")  # the MCP call was the last one
    page.fill("input[name=action]", "mcp.pipeline_call")
    page.select_option("select[name=status]", "success")
    page.fill("input[name=scope]", "bridge:pipes")
    page.click("button:has-text('Filter')")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("shout")
    screenshot(page, "audit")
    page.fill("input[name=action]", "")
    page.select_option("select[name=status]", "")
    page.fill("input[name=scope]", "")
    page.click("button:has-text('Filter')")
    expect(rows).to_have_count(11)  # every record of alice's, newest first: 3 runs, the save, 5 edits, the bridge, the connection
    expect(rows.nth(3)).to_contain_text("bridge.graph_save")
    expect(rows.nth(4)).to_contain_text("connection.delete")
    expect(rows.nth(10)).to_contain_text("connection.create")
    assert violations == []

    # paged: 20 records a page, older ones behind "Older"
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content") or ""
    for i in range(5):  # 10 more records: 21 in all
        made = alice.request.post(console.url + "/connections", headers={"x-csrf-token": csrf},
                                  data={"id": f"extra{i}", "endpoint": console.tools_url + "/mcp"})
        assert made.status == 201
        assert alice.request.delete(console.url + f"/connections/extra{i}", headers={"x-csrf-token": csrf}).status == 204
    assert wait_until(lambda: audit_count(alice, console.url) == 21)
    page.click("button:has-text('Filter')")
    expect(rows).to_have_count(20)
    expect(rows.first).to_contain_text("connection.delete")
    page.click("button:has-text('Older')")
    expect(page.get_by_text("page 2")).to_be_visible()
    expect(rows).to_have_count(1)
    expect(rows.last).to_contain_text("connection.create")
    expect(page.get_by_role("button", name="Older")).to_be_disabled()
    page.click("button:has-text('Newer')")
    expect(rows).to_have_count(20)
    page.fill("input[name=resource]", "shout")
    page.click("button:has-text('Filter')")
    expect(rows).to_have_count(3)  # the three runs of the pipeline
    page.fill("input[name=since]", "2099-01-01T00:00")
    page.click("button:has-text('Filter')")
    expect(page.get_by_text("No records.")).to_be_visible()
    page.fill("input[name=since]", "")
    page.fill("input[name=until]", "2000-01-01T00:00")
    page.click("button:has-text('Filter')")
    expect(rows).to_have_count(0)

    # a second account in a second browser context sees none of it
    bob, bob_page, bob_violations = signed_in(console, "bob")
    expect(bob_page.locator("[data-testid=connections] tbody tr")).to_have_count(0)
    expect(bob_page.locator("[data-testid=bridges] tbody tr")).to_have_count(0)
    assert bob.request.get(console.url + "/bridges/pipes/graph").status == 404
    bob_page.click("a:has-text('Audit Logs')")
    expect(bob_page.get_by_text("No records.")).to_be_visible()
    expect(bob_page.locator("[data-testid=audit] tbody tr")).to_have_count(0)
    assert re.search(re.escape(canary.ALICE_KEY), bob_page.content()) is None and bob_violations == []
    alice.close()
    bob.close()


def test_a_stored_graph_that_breaks_the_rules_shows_each_problem_on_its_element_and_nothing_is_saved(
    console: Console, tmp_path: Path,
) -> None:
    # R: C3, F8 -- a graph stored by an older version (the REST API never saves one): a cycle, an
    # edge to a node that is gone, a pipeline with a bad name
    alice, page, violations = signed_in(console, "alice")
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content") or ""
    assert alice.request.post(console.url + "/connections", headers={"x-csrf-token": csrf}, data={
        "id": "tools", "endpoint": console.tools_url + "/mcp"}).status == 201
    assert alice.request.post(console.url + "/bridges", headers={"x-csrf-token": csrf}, data={
        "id": "old", "connections": ["tools"]}).status == 201
    stored = {
        "version": 1,
        "nodes": [
            {"id": "in1", "kind": "input", "outputs": ["text"], "position": {"x": 40, "y": 40}},
            {"id": "t1", "kind": "tool", "connectionId": "tools", "tool": "echo", "inputs": ["text", "prefix"],
             "outputs": ["result"], "position": {"x": 300, "y": 40}},
            {"id": "t2", "kind": "tool", "connectionId": "tools", "tool": "echo", "inputs": ["text", "prefix"],
             "outputs": ["result"], "position": {"x": 300, "y": 240}},
            {"id": "out1", "kind": "output", "inputs": ["said"], "position": {"x": 600, "y": 40}},
        ],
        "edges": [
            {"id": "e1", "from": {"node": "in1", "port": "text"}, "to": {"node": "t1", "port": "text"}},
            {"id": "e2", "from": {"node": "t1", "port": "result"}, "to": {"node": "t2", "port": "text"}},
            {"id": "e3", "from": {"node": "t2", "port": "result"}, "to": {"node": "t1", "port": "prefix"}},
            {"id": "e4", "from": {"node": "t1", "port": "result"}, "to": {"node": "gone", "port": "x"}},
        ],
        "pipelines": [{"id": "p1", "name": "bad name", "inputNode": "in1", "outputNode": "out1"}],
    }
    with sqlite3.connect(tmp_path / "bridge.db") as db:
        db.execute("INSERT INTO graphs (bridge_owner, bridge_id, graph, updated_at) VALUES ('alice', 'old', ?, 0)",
                   (json.dumps(stored),))
    page.goto(console.url + "/console#/bridges/old")
    expect(node(page, "t2")).to_be_visible()
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_contain_text("Not saved")
    expect(node(page, "t1").locator(".problem")).to_contain_text("cycle")
    expect(node(page, "t2").locator(".problem")).to_contain_text("cycle")
    expect(node(page, "in1").locator(".problem")).to_have_count(0)
    expect(page.get_by_test_id("pipelines").locator(".problem")).to_contain_text("pipeline name must match")
    expect(page.get_by_test_id("graph-problems")).to_contain_text("edge e4 -> gone")  # not drawable: listed
    assert alice.request.get(console.url + "/bridges/old/graph").json() == stored  # nothing saved
    assert violations == []
    alice.close()


def test_a_members_item_and_the_orgs_of_one_id_are_two_rows_and_each_rows_buttons_act_on_that_one(
    console: Console, tmp_path: Path,
) -> None:
    # R: C2, F2 -- ids are per owner: alice's `dup` and the org's `dup` (made by another member, who
    # could not see alice's); her own shadows the org's by id, so the console names each by owner
    alice, page, violations = signed_in(console, "alice")
    page.fill("input[name=connection-id]", "dup")
    page.fill("input[name=connection-endpoint]", console.tools_url + "/mcp")
    page.click("button:has-text('Add connection')")
    page.fill("input[name=bridge-id]", "dupb")
    page.check("input[name=bridge-conn-dup]")
    page.click("button:has-text('Add bridge')")
    expect(page.locator('[data-testid=bridges] tr[data-id="dupb"]')).to_have_count(1)
    with sqlite3.connect(tmp_path / "bridge.db") as db:  # as carol of acme would have made them
        db.execute("INSERT INTO connections VALUES ('dup', 'org:acme', ?, NULL, NULL, 'api', NULL)", (console.tools_url + "/mcp",))
        db.execute("INSERT INTO bridges VALUES ('dupb', 'org:acme', '[\"dup\"]', 'api')")
    page.reload()
    expect(page.locator('[data-testid=bridges] tr[data-id="dupb"]')).to_have_count(2)
    expect(page.locator('[data-testid=connections] tr[data-id="dup"]')).to_have_count(2)
    expect(page.locator("input[name=bridge-conn-dup]")).to_have_count(1)
    # the MCP path of each: hers by id, the shadowed org's by id and owner
    expect(page.locator('[data-testid=bridges] tr[data-id="dupb"][data-owner="alice"] code')).to_have_text("/mcp/dupb")
    expect(page.locator('[data-testid=bridges] tr[data-id="dupb"][data-owner="org:acme"] code')).to_have_text("/mcp/dupb?owner=org%3Aacme")
    page.locator('[data-testid=bridges] tr[data-id="dupb"][data-owner="org:acme"]').get_by_text("Edit graph").click()
    expect(page.locator(".toolbar")).to_contain_text("Bridge dupb")
    expect(page.locator(".toolbar code")).to_have_text("/mcp/dupb?owner=org%3Aacme")
    add_node(page, "tool", "t1")
    node(page, "t1").click()
    page.select_option("select[name=connection]", "dup")
    expect(page.locator("select[name=tool] option[value='echo']")).to_have_count(1)  # the org's `dup`'s tools
    page.select_option("select[name=tool]", "echo")
    page.fill("input[name=const-text]", "hi")  # echo's required argument, as a constant
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    assert [n["id"] for n in alice.request.get(console.url + "/bridges/dupb/graph?owner=org:acme").json()["nodes"]] == ["t1"]
    assert alice.request.get(console.url + "/bridges/dupb/graph").json()["nodes"] == [], "her own is untouched"
    page.goto(console.url + "/console#/connections")
    with confirming(page) as asked:
        page.locator('[data-testid=connections] tr[data-id="dup"][data-owner="org:acme"]').get_by_role("button", name="Delete").click()
    expect(page.locator('[data-testid=connections] tr[data-id="dup"]')).to_have_count(1)
    expect(page.locator('[data-testid=connections] tr[data-id="dup"]')).to_have_attribute("data-owner", "alice")
    assert asked == ["Delete connection dup (org:acme)? Bridges that use it stop reaching its tools."]
    with sqlite3.connect(tmp_path / "bridge.db") as db:
        assert db.execute("SELECT owner FROM connections WHERE id = 'dup'").fetchall() == [("alice",)]
    assert violations == []
    alice.close()
