"""The graph editor as people use a workflow editor (issue 34), in a real browser: each failure
explained on its node, no work lost, the graph rules mirrored while drawing, tool constants and
typed pipeline inputs, the palette, import/export and versions. The same gateway, issuer, tool
server and chromium as test_console_browser.py (its fixture)."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.server import MCPServer
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import BrowserContext, Page, expect

from tests.integration.test_console_browser import (  # noqa: F401 -- `console` is the fixture
    Console, confirming, console, draw_edge, node, signed_in,
)
from tests.support import canary
from tests.support.bridge_servers import mcp_http
from tests.support.browser import screenshot
from tests.support.http_server import serve


def csrf_of(page: Page) -> str:
    return page.locator('meta[name="csrf-token"]').get_attribute("content") or ""


def tool(node_id: str, connection: str, name: str, inputs: list[str], x: int, y: int, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "tool", "connectionId": connection, "tool": name, "inputs": inputs,
            "outputs": ["result"], "position": {"x": x, "y": y}, **extra}


def edge(edge_id: str, source: str, source_port: str, target: str, target_port: str) -> dict[str, Any]:
    return {"id": edge_id, "from": {"node": source, "port": source_port}, "to": {"node": target, "port": target_port}}


# in1.text -> t1 (echo on `tools`) -> out1.result: the pipeline `shout`
SHOUT = {
    "version": 1,
    "nodes": [
        {"id": "in1", "kind": "input", "outputs": ["text"], "position": {"x": 40, "y": 40}},
        tool("t1", "tools", "echo", ["text", "prefix"], 300, 40),
        {"id": "out1", "kind": "output", "inputs": ["result"], "position": {"x": 600, "y": 40}},
    ],
    "edges": [edge("e1", "in1", "text", "t1", "text"), edge("e2", "t1", "result", "out1", "result")],
    "pipelines": [{"id": "p1", "name": "shout", "inputNode": "in1", "outputNode": "out1"}],
}


def made(console: Console, context: BrowserContext, page: Page, graph: dict[str, Any] | None = None,
         connections: tuple[str, ...] = ("tools",), unsigned: tuple[str, ...] = ()) -> None:
    """Through the REST API with the page's session: the connections (with the tool server's
    credential, except those in `unsigned`: their calls fail), the bridge `pipes` over them, its graph."""
    headers = {"x-csrf-token": csrf_of(page)}
    for cid in connections:
        data = {"id": cid, "endpoint": console.tools_url + "/mcp"}
        if cid not in unsigned:
            data |= {"authHeaderName": canary.CONNECTION_HEADER, "authSecret": canary.CONNECTION_TOKEN}
        assert context.request.post(console.url + "/connections", headers=headers, data=data).status == 201
    assert context.request.post(console.url + "/bridges", headers=headers,
                                data={"id": "pipes", "connections": list(connections)}).status == 201
    if graph is not None:
        answer = context.request.put(console.url + "/bridges/pipes/graph", headers=headers, data=graph)
        assert answer.status == 200, answer.text()


def saved_graph(context: BrowserContext, console: Console) -> dict[str, Any]:
    return context.request.get(console.url + "/bridges/pipes/graph").json()


async def tools_over_mcp(url: str) -> list[Any]:
    """The bridge's tools/list as alice's MCP client sees it."""
    async with Client(streamable_http_client(url, http_client=mcp_http("alice-key"))) as client:
        return (await client.list_tools()).tools


def re_class(name: str) -> re.Pattern[str]:
    """A class attribute that has `name` among its classes."""
    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")


def open_editor(page: Page, console: Console) -> None:
    page.goto(console.url + "/console#/bridges/pipes")
    expect(page.get_by_text("Bridge pipes")).to_be_visible()


def test_a_failed_run_marks_its_node_with_the_reason_and_the_try_panel_shows_each_nodes_values_and_the_run_history(
    console: Console,
) -> None:
    # R: C5, C8 -- in1 -> t1 (echo on `tools`) -> t2 (echo on `bad`, whose calls the server refuses) -> out1
    alice, page, violations = signed_in(console, "alice")
    graph = {
        "version": 1,
        "nodes": [
            {"id": "in1", "kind": "input", "outputs": ["text"], "position": {"x": 40, "y": 40}},
            tool("t1", "tools", "echo", ["text", "prefix"], 260, 40),
            tool("t2", "bad", "echo", ["text", "prefix"], 480, 160),
            {"id": "out1", "kind": "output", "inputs": ["result"], "position": {"x": 800, "y": 40}},
        ],
        "edges": [edge("e1", "in1", "text", "t1", "text"), edge("e2", "t1", "result", "t2", "text"),
                  edge("e3", "t2", "result", "out1", "result")],
        "pipelines": [{"id": "p1", "name": "relay", "inputNode": "in1", "outputNode": "out1"}],
    }
    made(console, alice, page, graph, connections=("tools", "bad"), unsigned=("bad",))
    open_editor(page, console)
    page.fill("textarea[name=try-arguments]", '{"text": "hi"}')
    page.click("button:has-text('Run')")
    expect(page.get_by_test_id("try-result")).to_contain_text("node t2 (echo) failed: Error executing tool echo: missing or wrong credential")
    # the failed node is marked on the canvas with its reason; the ones before and after are not
    expect(node(page, "t2").locator(".bridge-node")).to_have_class(re_class("run-failed"))
    expect(node(page, "t2").get_by_test_id("run-note")).to_have_text("failed: Error executing tool echo: missing or wrong credential")
    expect(node(page, "t2").locator(".bridge-node")).to_have_attribute("title", "failed: Error executing tool echo: missing or wrong credential")
    expect(node(page, "t1").locator(".bridge-node")).to_have_class(re_class("run-ok"))
    expect(node(page, "t1").get_by_test_id("run-note")).to_have_count(0)
    expect(node(page, "out1").get_by_test_id("run-note")).to_contain_text("skipped")
    # each node's status, and what it took and gave
    runs = page.get_by_test_id("node-runs")
    expect(runs.locator("tr[data-node=t1] td").nth(1)).to_have_text("ok")
    expect(runs.locator("tr[data-node=t2] td").nth(1)).to_have_text("failed")
    expect(runs.locator("tr[data-node=t2] .reason")).to_have_text("Error executing tool echo: missing or wrong credential")
    expect(runs.locator("tr[data-node=out1] td").nth(1)).to_have_text("skipped")
    runs.locator("tr[data-node=t1] summary").click()
    expect(page.get_by_test_id("node-input-t1")).to_contain_text('"text": "hi"')
    expect(page.get_by_test_id("node-output-t1")).to_contain_text("hi")
    runs.locator("tr[data-node=t2] summary").click()
    expect(page.get_by_test_id("node-input-t2")).to_contain_text('"text": "hi"')
    # the pipeline's run history, newest first, with each node's status
    history = page.get_by_test_id("run-history").locator("li")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("failed")
    expect(history.first).to_contain_text("t2: failed")
    expect(history.first.locator(".reason")).to_contain_text("missing or wrong credential")
    screenshot(page, "editor-failed-run")

    # two more runs (one through the REST route, one from the panel): all three listed
    csrf = csrf_of(page)
    answer = alice.request.post(console.url + "/bridges/pipes/run", headers={"x-csrf-token": csrf},
                                data={"name": "relay", "arguments": {"text": 7}})
    assert answer.ok and answer.json()["isError"] is True
    page.click("button:has-text('Run')")
    expect(history).to_have_count(3)

    # the connection `bad` is deleted: its node is greyed with the reason, before anything runs
    assert alice.request.delete(console.url + "/connections/bad", headers={"x-csrf-token": csrf}).status == 204
    page.reload()
    expect(node(page, "t2").locator(".bridge-node")).to_have_class(re_class("broken"))
    expect(node(page, "t2").locator(".broken-note")).to_have_text("connection bad was deleted")
    expect(node(page, "t1").locator(".bridge-node")).not_to_have_class(re_class("broken"))

    # the audit record of a failed run carries its reason, shown in Audit Logs
    page.click("a:has-text('Audit Logs')")
    page.fill("input[name=action]", "mcp.pipeline_call")
    page.select_option("select[name=status]", "failure")
    page.click("button:has-text('Filter')")
    rows = page.locator("[data-testid=audit] tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(2).locator("td.reason")).to_have_text(
        "node t2 (echo) failed: Error executing tool echo: missing or wrong credential")
    assert violations == []
    alice.close()


def test_edits_are_undone_and_redone_guarded_on_leaving_and_a_stale_save_is_a_conflict_to_reload_or_overwrite(
    console: Console,
) -> None:
    # R: C6
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page, SHOUT)
    open_editor(page, console)
    expect(page.get_by_test_id("unsaved")).to_have_count(0)
    page.click("button:has-text('+ merge')")
    expect(node(page, "m1")).to_be_visible()
    expect(page.get_by_test_id("unsaved")).to_be_visible()

    # undo/redo: the buttons and the keys (on the canvas, not inside a text field)
    page.click("button:has-text('Undo')")
    expect(node(page, "m1")).to_have_count(0)
    expect(page.get_by_test_id("unsaved")).to_have_count(0)  # back to the saved graph
    page.click("button:has-text('Redo')")
    expect(node(page, "m1")).to_be_visible()
    page.get_by_test_id("canvas").locator(".react-flow__pane").click(position={"x": 5, "y": 300})
    page.keyboard.press("Control+z")
    expect(node(page, "m1")).to_have_count(0)
    page.keyboard.press("Control+Shift+z")
    expect(node(page, "m1")).to_be_visible()
    page.keyboard.press("Control+z")
    page.keyboard.press("Control+y")
    expect(node(page, "m1")).to_be_visible()
    node(page, "m1").click()
    page.fill("input[name=label]", "joins")
    page.keyboard.press("Control+z")  # inside a text field: the field's own undo, not the graph's
    expect(node(page, "m1")).to_be_visible()

    # leaving with unsaved edits asks first, in the app and when the page is left
    with confirming(page, accept=False) as asked:
        page.click("a:has-text('← Bridges')")
    assert asked == ["This graph has unsaved edits. Leave and lose them?"]
    expect(page.get_by_text("Bridge pipes")).to_be_visible()
    expect(node(page, "m1")).to_be_visible()
    assert page.url.endswith("#/bridges/pipes")
    unload: list[str] = []
    page.once("dialog", lambda d: (unload.append(d.type), d.dismiss()))
    with page.expect_event("dialog"):
        page.close(run_before_unload=True)
    assert unload == ["beforeunload"]
    expect(node(page, "m1")).to_be_visible()
    assert not page.is_closed()

    # a second tab (stale once the first saves) -- its save is refused, then reloaded
    other = alice.new_page()
    open_editor(other, console)
    expect(node(other, "t1")).to_be_visible()
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    expect(page.get_by_test_id("unsaved")).to_have_count(0)
    other.click("button:has-text('+ output')")
    expect(node(other, "out2")).to_be_visible()
    other.click("button:has-text('Save')")
    conflict = other.get_by_test_id("conflict")
    expect(conflict).to_contain_text("Someone else saved this graph while you were editing it")
    expect(other.get_by_role("status")).to_contain_text("Not saved")
    assert {n["id"] for n in saved_graph(alice, console)["nodes"]} == {"in1", "t1", "out1", "m1"}  # the newer work stays
    screenshot(other, "editor-conflict")

    # overwrite: the stale tab's graph replaces the newer one, knowingly
    conflict.get_by_role("button", name="Overwrite").click()
    expect(other.get_by_role("status")).to_have_text("Saved.")
    expect(conflict).to_have_count(0)
    assert {n["id"] for n in saved_graph(alice, console)["nodes"]} == {"in1", "t1", "out1", "out2"}

    # and the first tab, stale now, reloads instead: it shows the saved graph, nothing unsaved
    page.click("button:has-text('+ merge')")
    page.click("button:has-text('Save')")
    page.get_by_test_id("conflict").get_by_role("button", name="Reload").click()
    expect(node(page, "out2")).to_be_visible()
    expect(node(page, "m1")).to_have_count(0)
    expect(page.get_by_test_id("unsaved")).to_have_count(0)
    page.click("a:has-text('← Bridges')")  # nothing unsaved: no question
    expect(page.get_by_role("heading", name="Connections")).to_be_visible()
    assert violations == []
    alice.close()


def test_the_editor_mirrors_the_graph_rules_one_edge_per_input_port_delete_keys_and_the_servers_errors_on_nodes(
    console: Console,
) -> None:
    # R: C3, C7, C9 (Delete and Backspace, confirm before delete)
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page, SHOUT)
    open_editor(page, console)
    page.click("button:has-text('+ input')")
    expect(node(page, "in2")).to_be_visible()
    draw_edge(page, "in2", "query", "t1", "text")  # t1.text is fed by in1 already: refused while drawing
    expect(page.get_by_role("status")).to_contain_text("refused: input t1.text already has an edge (from in1.text)")
    expect(page.locator(".react-flow__edge")).to_have_count(2)
    draw_edge(page, "in2", "query", "t1", "prefix")  # a free port takes it
    expect(page.locator(".react-flow__edge")).to_have_count(3)

    # Delete removes the selected edge, Backspace the selected node (and its edges)
    page.locator('.react-flow__edge[data-id="e2"]').click(force=True)
    page.keyboard.press("Delete")
    expect(page.locator('.react-flow__edge[data-id="e2"]')).to_have_count(0)
    node(page, "in2").click()
    page.keyboard.press("Backspace")
    expect(node(page, "in2")).to_have_count(0)
    expect(page.locator(".react-flow__edge")).to_have_count(1)

    # the server's errors are shown on the node they name: out1's input is no longer fed
    node(page, "t1").click()
    page.select_option("select[name=wire-text]", "")  # t1's required text: neither wired nor a constant
    expect(page.locator(".react-flow__edge")).to_have_count(0)
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_contain_text("Not saved")
    expect(node(page, "t1").locator(".problem")).to_contain_text('required argument "text" of "echo"')
    assert saved_graph(alice, console)["edges"] == SHOUT["edges"]  # nothing saved

    # removing a pipeline is confirmed
    with confirming(page, accept=False) as asked:
        page.click("button[aria-label='remove pipeline shout']")
    assert asked == ["Remove pipeline shout? (Nothing is saved until Save.)"]
    expect(page.locator("input[name=pipeline-name-0]")).to_have_value("shout")
    with confirming(page):
        page.click("button[aria-label='remove pipeline shout']")
    expect(page.locator("input[name=pipeline-name-0]")).to_have_count(0)
    assert violations == []
    alice.close()


def test_a_tool_node_lists_its_connections_tools_takes_typed_constants_and_a_pipeline_its_description_and_typed_inputs(
    console: Console,
) -> None:
    # R: C7, C3, C9 (keyboard: the palette and the inspector's wiring draw the graph without a mouse)
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page)
    open_editor(page, console)
    # the palette: search the kinds and the connection's tools; Enter adds the first match
    page.fill("input[name=palette]", "input")
    page.keyboard.press("Enter")
    expect(node(page, "in1")).to_be_visible()
    page.fill("input[name=palette]", "echo")
    expect(page.get_by_role("option", name="tools / echo")).to_be_visible()
    page.keyboard.press("Enter")
    expect(node(page, "t1")).to_contain_text("echo")
    expect(node(page, "t1").locator('[data-handleid="in:prefix"]')).to_have_count(1)
    # the tool dropdown names the tools of the chosen connection, never a bare "(choose)"
    expect(page.locator("select[name=connection]")).to_have_value("tools")  # the bridge's only connection
    expect(page.locator("select[name=tool]")).to_have_value("echo")
    assert "(choose)" not in page.locator("select[name=tool]").inner_text()
    options = page.locator("select[name=tool] option").all_inner_texts()
    assert {"echo", "boom", "slow_a", "weird.tool/v2"} <= set(options)
    # constants typed from the schema: prefix (a string) as a constant, text wired from the input
    expect(page.get_by_test_id("constants")).to_contain_text("text *")
    page.fill("input[name=const-prefix]", ">> ")
    page.select_option("select[name=wire-text]", "in1.query")
    expect(page.get_by_test_id("constants")).to_contain_text("wired from in1.query")
    page.fill("input[name=palette]", "output")
    page.keyboard.press("Enter")
    expect(node(page, "out1")).to_be_visible()
    page.select_option("select[name=wire-result]", "t1.result")
    expect(page.locator(".react-flow__edge")).to_have_count(2)
    # a pipeline with a description and a typed, required input
    page.click("button:has-text('Add pipeline')")
    page.fill("input[name=pipeline-name-0]", "shout")
    page.fill("input[name=pipeline-description-0]", "Echo a text with a prefix")
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    # its input's type prefilled from the wiring when opened (query feeds echo's text: a string), editable
    page.locator(".typed-inputs summary").click()
    expect(page.locator("select[name=pipeline-type-0-query]")).to_have_value("string")
    expect(page.get_by_test_id("infer-note")).to_have_text("inferred from the wiring: query (editable)")
    page.select_option("select[name=pipeline-type-0-query]", "integer")
    page.click("button:has-text('Infer types')")  # asked again: back to what the wiring says
    expect(page.locator("select[name=pipeline-type-0-query]")).to_have_value("string")
    page.check("input[name=pipeline-required-0-query]")
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    saved = saved_graph(alice, console)
    t1 = next(n for n in saved["nodes"] if n["id"] == "t1")
    assert t1["config"] == {"prefix": ">> "} and t1["tool"] == "echo" and t1["connectionId"] == "tools"
    [pipeline] = saved["pipelines"]
    assert pipeline["description"] == "Echo a text with a prefix" and pipeline["required"] == ["query"]
    assert pipeline["inputs"]["query"]["type"] == "string"
    # what an MCP client sees of it: the description and the typed, required input
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API holds this thread's event loop
        listed = thread.submit(asyncio.run, tools_over_mcp(console.url + "/mcp/pipes")).result()
    shout = next(t for t in listed if t.name == "shout")
    assert shout.description and "Echo a text with a prefix" in shout.description
    assert shout.input_schema["properties"]["query"]["type"] == "string" and shout.input_schema["required"] == ["query"]
    # the typed input prefills the arguments; the constant is used by the run
    expect(page.locator("textarea[name=try-arguments]")).to_have_value('{"query":""}')
    page.fill("textarea[name=try-arguments]", '{"query": "hi"}')
    page.click("button:has-text('Run')")
    expect(page.get_by_test_id("try-result")).to_contain_text(">> hi")
    node(page, "t1").click()  # its inspector: the tool, its arguments wired or constant
    expect(page.get_by_test_id("constants")).to_be_visible()
    screenshot(page, "editor-constants")
    assert violations == []
    alice.close()


def test_a_graph_is_exported_to_a_json_file_and_imported_from_one_unsaved_until_save(console: Console, tmp_path: Path) -> None:
    # R: C6
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page, SHOUT)
    open_editor(page, console)
    with page.expect_download() as download:
        page.click("button:has-text('Export')")
    assert download.value.suggested_filename == "pipes.graph.json"
    exported = json.loads(Path(download.value.path()).read_text())
    assert [n["id"] for n in exported["nodes"]] == ["in1", "t1", "out1"] and exported["edges"] == SHOUT["edges"]
    assert exported["pipelines"] == SHOUT["pipelines"]

    changed = {**exported, "nodes": [*exported["nodes"], {"id": "m1", "kind": "merge", "inputs": ["a", "b"],
                                                            "outputs": ["merged"], "position": {"x": 300, "y": 260}}]}
    (tmp_path / "mine.json").write_text(json.dumps(changed))
    page.set_input_files("input[name=import-graph]", str(tmp_path / "mine.json"))
    expect(node(page, "m1")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("Imported mine.json: not saved yet")
    expect(page.get_by_test_id("unsaved")).to_be_visible()
    assert "m1" not in {n["id"] for n in saved_graph(alice, console)["nodes"]}
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    assert {n["id"] for n in saved_graph(alice, console)["nodes"]} == {"in1", "t1", "out1", "m1"}

    (tmp_path / "bad.json").write_text('{"nodes": 3}')
    page.set_input_files("input[name=import-graph]", str(tmp_path / "bad.json"))
    expect(page.get_by_role("status")).to_contain_text("Not imported: not a graph")
    expect(node(page, "m1")).to_be_visible()  # the canvas is untouched
    assert violations == []
    alice.close()


def test_the_canvas_basics_are_reachable_by_keyboard(console: Console) -> None:
    # R: C9 -- Tab reaches the nodes, Enter selects one (its inspector opens), the arrows move it,
    # the inspector's selects wire it, Delete removes it
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page, SHOUT)
    open_editor(page, console)
    expect(node(page, "out1")).to_be_visible()
    page.locator("button:has-text('Save')").focus()
    on_node = "document.activeElement.classList.contains('react-flow__node')"
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate(on_node):
            break
    assert page.evaluate(on_node), "Tab never reached a node"
    focused = page.evaluate("document.activeElement.dataset.id")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("inspector").locator("h3")).to_contain_text(focused)
    before = node(page, focused).evaluate("n => getComputedStyle(n).transform")
    page.keyboard.press("ArrowRight")
    expect(node(page, focused)).not_to_have_css("transform", before)

    # out1's input unwired and wired again from the keyboard, in the inspector
    node(page, "out1").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("inspector").locator("h3")).to_have_text("output out1")
    wire = page.locator("select[name=wire-result]")
    wire.focus()
    page.keyboard.press("Home")  # the first choice: (not wired)
    expect(wire).to_have_value("")
    expect(page.locator(".react-flow__edge")).to_have_count(1)
    wire.focus()
    page.keyboard.press("End")
    expect(wire).to_have_value("t1.result")
    expect(page.locator(".react-flow__edge")).to_have_count(2)
    node(page, "out1").focus()
    page.keyboard.press("Delete")
    expect(node(page, "out1")).to_have_count(0)
    expect(page.locator(".react-flow__edge")).to_have_count(1)
    assert violations == []
    alice.close()


def test_the_graphs_saved_versions_are_listed_viewed_and_one_is_restored(console: Console) -> None:
    # R: C6
    alice, page, violations = signed_in(console, "alice")
    made(console, alice, page, SHOUT)  # version 1
    open_editor(page, console)
    page.click("button:has-text('+ merge')")
    page.click("button:has-text('Save')")  # version 2
    expect(page.get_by_role("status")).to_have_text("Saved.")
    page.click("button:has-text('Versions')")
    versions = page.get_by_test_id("versions")
    expect(versions.locator("tbody tr")).to_have_count(2)
    expect(versions.locator('tr[data-version="2"]')).to_contain_text("(current)")
    expect(versions.locator('tr[data-version="2"]')).to_contain_text("4 nodes, 2 edges")
    expect(versions.locator('tr[data-version="1"]')).to_contain_text("3 nodes, 2 edges")
    versions.locator('tr[data-version="1"]').get_by_role("button", name="View").click()
    viewed = page.get_by_test_id("version-view")
    expect(viewed).to_contain_text("version 1")
    expect(viewed.locator("pre")).to_contain_text('"id": "t1"')
    expect(viewed.locator("pre")).not_to_contain_text('"m1"')
    screenshot(page, "editor-versions")
    versions.locator('tr[data-version="1"]').get_by_role("button", name="Restore").click()
    expect(page.get_by_role("status")).to_contain_text("Restored version 1")
    expect(node(page, "m1")).to_have_count(0)
    expect(page.get_by_test_id("unsaved")).to_have_count(0)
    assert [n["id"] for n in saved_graph(alice, console)["nodes"]] == ["in1", "t1", "out1"]
    # the restore is itself a save: the newest version, and the one the editor now stands on
    expect(versions.locator("tbody tr").first).to_contain_text("(current)")
    page.click("button:has-text('+ output')")
    page.click("button:has-text('Save')")
    expect(page.get_by_role("status")).to_have_text("Saved.")
    assert violations == []
    alice.close()


def typed_tool_server() -> Any:
    """An MCP server with one tool whose arguments are of each JSON type the inspector edits."""
    server = MCPServer("typed-tools")

    @server.tool()
    async def repeat(text: str, times: int, shout: bool, tags: list[str]) -> str:
        said = " ".join([text.upper() if shout else text] * times)
        return f"{said} #{'#'.join(tags)}"

    return server.streamable_http_app()


def test_constants_are_typed_from_the_tools_schema_a_number_a_boolean_and_json(console: Console) -> None:
    # R: C7 -- `repeat(text: str, times: int, shout: bool, tags: list[str])` on a second real MCP server
    alice, page, violations = signed_in(console, "alice")
    headers = {"x-csrf-token": csrf_of(page)}
    with serve(typed_tool_server()) as typed:
        assert alice.request.post(console.url + "/connections", headers=headers,
                                  data={"id": "typed", "endpoint": typed.url + "/mcp"}).status == 201
        assert alice.request.post(console.url + "/bridges", headers=headers,
                                  data={"id": "pipes", "connections": ["typed"]}).status == 201
        open_editor(page, console)
        page.fill("input[name=palette]", "input")
        page.keyboard.press("Enter")
        page.fill("input[name=palette]", "repeat")
        expect(page.get_by_role("option", name="typed / repeat")).to_be_visible()
        page.keyboard.press("Enter")
        expect(node(page, "t1")).to_contain_text("repeat")
        constants = page.get_by_test_id("constants")
        expect(constants).to_contain_text("times * integer")
        expect(constants).to_contain_text("shout * boolean")
        expect(constants).to_contain_text("tags * array")
        expect(page.locator("input[name=const-times]")).to_have_attribute("type", "number")
        page.fill("input[name=const-times]", "3")
        page.select_option("select[name=const-shout]", "true")
        page.fill("textarea[name=const-tags]", '["a", "b"')  # not JSON: refused, nothing set
        page.keyboard.press("Tab")
        expect(constants.get_by_role("alert")).to_contain_text("not JSON")
        page.fill("textarea[name=const-tags]", '["a", "b"]')
        page.keyboard.press("Tab")
        expect(constants.get_by_role("alert")).to_have_count(0)
        page.select_option("select[name=wire-text]", "in1.query")
        page.fill("input[name=palette]", "output")
        page.keyboard.press("Enter")
        page.select_option("select[name=wire-result]", "t1.result")
        page.click("button:has-text('Add pipeline')")
        page.fill("input[name=pipeline-name-0]", "loud")
        page.click("button:has-text('Save')")
        expect(page.get_by_role("status")).to_have_text("Saved.")
        t1 = next(n for n in saved_graph(alice, console)["nodes"] if n["id"] == "t1")
        assert t1["config"] == {"times": 3, "shout": True, "tags": ["a", "b"]}
        expect(node(page, "t1").locator(".constants-shown")).to_have_text('times = 3, shout = true, tags = ["a","b"]')
        page.fill("textarea[name=try-arguments]", '{"query": "hi"}')
        page.click("button:has-text('Run')")
        expect(page.get_by_test_id("try-result")).to_contain_text("HI HI HI #a#b")
    assert violations == []
    alice.close()
