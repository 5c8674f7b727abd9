// C3, C5, C6: one bridge's graph on a React Flow canvas — its inspector, pipelines, save (If-Match,
// conflicts), undo/redo, versions, import/export, and trying a pipeline with each node's outcome.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  Background, Controls, Handle, Position, ReactFlow, ReactFlowProvider, addEdge,
  useEdgesState, useNodesInitialized, useNodesState, useReactFlow, useUpdateNodeInternals,
} from "@xyflow/react";
import { api, itemPath, optional, request } from "./api.js";
import { Inspector } from "./Inspector.jsx";
import { Pipelines, TryPanel, Versions } from "./EditorPanels.jsx";
import { Palette } from "./Palette.jsx";
import { ARROW, IN, OUT, canon, drawable, edgeInto, freshId, fromFlow, parseGraphFile, refusal, toFlow } from "./graph.js";
import { guardLeaving } from "./guard.js";

const DEFAULT_PORTS = {
  input: { inputs: [], outputs: ["query"] },
  tool: { inputs: [], outputs: ["result"] },
  merge: { inputs: ["a", "b"], outputs: ["merged"] },
  output: { inputs: ["result"], outputs: [] },
};
const ID_PREFIX = { input: "in", tool: "t", merge: "m", output: "out" };
const HISTORY = 100;

function BridgeNode({ id, data, selected }) {
  const update = useUpdateNodeInternals();
  const ports = `${data.inputs.join(",")}|${data.outputs.join(",")}`;
  useEffect(() => { update(id); }, [id, ports, update]);
  const rows = Math.max(data.inputs.length, data.outputs.length);
  const run = data.run;
  const classes = ["bridge-node", `kind-${data.kind}`];
  if (data.problems.length) classes.push("has-problem");
  if (selected) classes.push("selected");
  if (run) classes.push(`run-${run.status}`);
  if (data.broken) classes.push("broken");
  const title = [data.broken, run?.reason && `${run.status}: ${run.reason}`].filter(Boolean).join("\n") || undefined;
  return (
    <div className={classes.join(" ")} title={title}>
      <div className="title"><span className="kind">{data.kind}</span> {id}{data.tool ? ` · ${data.tool}` : ""}</div>
      {data.label && <div className="label">{data.label}</div>}
      <div className="ports">
        {Array.from({ length: rows }, (_, i) => (
          <div className="port-row" key={i}>
            <span className="port in">{data.inputs[i] !== undefined && <>
              <Handle type="target" position={Position.Left} id={IN + data.inputs[i]} />{data.inputs[i]}</>}
            </span>
            <span className="port out">{data.outputs[i] !== undefined && <>
              {data.outputs[i]}<Handle type="source" position={Position.Right} id={OUT + data.outputs[i]} /></>}
            </span>
          </div>
        ))}
      </div>
      {data.config && Object.keys(data.config).length > 0 && (
        <div className="constants-shown">{Object.entries(data.config).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join(", ")}</div>
      )}
      {data.broken && <div className="broken-note">{data.broken}</div>}
      {run && run.status !== "ok" && <div className={`run-note run-${run.status}`} data-testid="run-note">{run.status}{run.reason ? `: ${run.reason}` : ""}</div>}
      {data.problems.map((p, i) => <div className="problem" role="alert" key={i}>{p}</div>)}
      {(data.warnings || []).map((w, i) => <div className="warning" key={`w${i}`}>{w}</div>)}
    </div>
  );
}
const nodeTypes = { bridgeNode: BridgeNode };

/** Where a new node goes: the first place of a 4-wide grid that no node stands on. */
function freeSpot(nodes) {
  for (let i = 0; ; i++) {
    const spot = { x: 60 + (i % 4) * 230, y: 40 + Math.floor(i / 4) * 170 };
    if (!nodes.some((n) => Math.abs(n.position.x - spot.x) < 200 && Math.abs(n.position.y - spot.y) < 130)) return spot;
  }
}

/** The nodes of a run: the server's list, or (an older gateway) the one its text names as failed. */
function runNodes(answer) {
  if (Array.isArray(answer?.nodes)) return answer.nodes;
  const m = /node (\S+) \(([^)]*)\) failed:?\s*(.*)/s.exec(answer?.text || "");
  return m ? [{ id: m[1], tool: m[2], status: "failed", reason: m[3] || "failed" }] : [];
}

/** Why a tool node cannot run as drawn: its connection left the bridge, was deleted, or is unhealthy. */
function brokenReason(node, bridge, connections) {
  const id = node.data.connectionId;
  if (node.data.kind !== "tool" || !id || !bridge) return null;
  if (!bridge.connections.includes(id)) return `connection ${id} is not part of bridge ${bridge.id}`;
  if (connections === null) return null;
  const seen = connections.filter((c) => c.id === id);
  if (!seen.length) return `connection ${id} was deleted`;
  const mine = seen.find((c) => c.owner === bridge.owner) || seen[0];
  if (mine.health && mine.health.ok === false) return `connection ${id} is failing: ${mine.health.error || "unreachable"}`;
  return null;
}

function Editor({ bridgeId, owner }) {
  const [bridge, setBridge] = useState(null);
  const [nodes, setNodes, onNodesChange] = useNodesState([]);
  const [edges, setEdges, onEdgesChange] = useEdgesState([]);
  const [pipelines, setPipelines] = useState([]);
  const [selectedId, setSelectedId] = useState(null);
  const [status, setStatus] = useState(null);
  const [problems, setProblems] = useState([]);  // the server's problems that name no node, edge or pipeline on screen
  const [problemMap, setProblemMap] = useState(new Map());  // id -> messages, for the pipelines' rows
  const [fit, setFit] = useState(false);
  const [etag, setEtag] = useState(null);
  const [savedJson, setSavedJson] = useState(null);  // the graph as last loaded or saved (canon)
  const [conflict, setConflict] = useState(null);
  const [lastRun, setLastRun] = useState(null);
  const [connections, setConnections] = useState(null);  // GET /connections, for their health
  const [showVersions, setShowVersions] = useState(false);
  const history = useRef({ past: [], future: [], committed: null, applying: false });
  const [, setHistoryTick] = useState(0);
  const initialized = useNodesInitialized();
  const flow = useReactFlow();
  const graphPath = itemPath("bridges", bridgeId, owner, "/graph");
  useEffect(() => {  // a saved graph is fitted into view once its nodes are measured; a new one starts at scale 1
    if (fit && initialized) { flow.fitView({ maxZoom: 1, padding: 0.1 }); setFit(false); }
  }, [fit, initialized, flow]);
  const toolCache = useMemo(() => new Map(), []);

  const show = useCallback((graph, tag) => {  // a graph from the server onto the canvas: nothing unsaved
    const loaded = toFlow(graph);
    setFit(loaded.nodes.length > 0);
    setNodes(loaded.nodes); setEdges(loaded.edges); setPipelines(loaded.pipelines);
    setEtag(tag);
    const json = canon(fromFlow(loaded.nodes, loaded.edges, loaded.pipelines));
    setSavedJson(json);
    history.current = { past: [], future: [], committed: json, applying: false };  // the first step starts here
    setHistoryTick((n) => n + 1);
    setProblems([]); setProblemMap(new Map()); setConflict(null); setLastRun(null);
  }, [setNodes, setEdges]);

  useEffect(() => {
    Promise.all([api("GET", itemPath("bridges", bridgeId, owner)), request("GET", graphPath)])
      .then(([b, g]) => { setBridge(b); show(g.data, g.etag); })
      .catch((e) => setStatus({ error: true, text: e.message }));
    optional("GET", "/connections").then((c) => setConnections(c ? c.data : null), () => setConnections(null));
  }, [bridgeId, owner, graphPath, show]);

  const current = useMemo(() => canon(fromFlow(nodes, edges, pipelines)), [nodes, edges, pipelines]);
  const dirty = savedJson !== null && current !== savedJson;
  const dirtyRef = useRef(false);
  dirtyRef.current = dirty;
  useEffect(() => guardLeaving(() => dirtyRef.current), []);

  // undo/redo: each settled change of the graph (not mid-drag) is a step
  const dragging = nodes.some((n) => n.dragging);
  useEffect(() => {
    const h = history.current;
    if (savedJson === null || dragging) return;
    if (h.committed === null || h.applying) { h.committed = current; h.applying = false; return; }
    if (current === h.committed) return;
    h.past.push(h.committed);
    if (h.past.length > HISTORY) h.past.shift();
    h.future = [];
    h.committed = current;
    setHistoryTick((n) => n + 1);
  }, [current, dragging, savedJson]);
  const apply = useCallback((json) => {
    const g = toFlow(JSON.parse(json));
    history.current.applying = true;
    history.current.committed = json;
    setNodes(g.nodes); setEdges(g.edges); setPipelines(g.pipelines);
    setSelectedId((id) => (g.nodes.some((n) => n.id === id) ? id : null));
    setHistoryTick((n) => n + 1);
  }, [setNodes, setEdges]);
  const undo = useCallback(() => {
    const h = history.current;
    if (!h.past.length) return;
    h.future.push(h.committed);
    apply(h.past.pop());
  }, [apply]);
  const redo = useCallback(() => {
    const h = history.current;
    if (!h.future.length) return;
    h.past.push(h.committed);
    apply(h.future.pop());
  }, [apply]);
  useEffect(() => {
    const onKey = (e) => {
      if (!(e.ctrlKey || e.metaKey)) return;
      const t = e.target;
      if (t instanceof HTMLElement && (t.closest("input, textarea, select") || t.isContentEditable)) return;  // the field's own undo
      const key = e.key.toLowerCase();
      if (key === "z" && !e.shiftKey) { e.preventDefault(); undo(); }
      else if ((key === "z" && e.shiftKey) || key === "y") { e.preventDefault(); redo(); }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [undo, redo]);

  const toolsOf = useCallback((connectionId) => {
    if (!toolCache.has(connectionId)) {
      // an org bridge names the org's connections only; a user's, the user's own before the org's
      const among = bridge?.owner.startsWith("org:") ? bridge.owner : undefined;
      const listing = api("GET", itemPath("connections", connectionId, among, "/tools")).then((r) => r.data);
      listing.catch(() => toolCache.delete(connectionId));  // a failed listing is asked again next time
      toolCache.set(connectionId, listing);
    }
    return toolCache.get(connectionId);
  }, [toolCache, bridge?.owner]);

  const isValidConnection = useCallback((c) => {
    const why = refusal(edges, c);
    if (why) { setStatus({ error: true, text: why }); return false; }
    return true;
  }, [edges]);
  const onConnect = useCallback((c) => {
    setEdges((es) => (refusal(es, c) ? es : addEdge({ ...c, id: freshId("e", new Set(es.map((e) => e.id))), markerEnd: ARROW }, es)));
    setStatus(null);
  }, [setEdges]);

  const addNode = (kind, extra = {}) => {
    const id = freshId(ID_PREFIX[kind], new Set(nodes.map((n) => n.id)));
    const position = freeSpot(nodes);
    const data = { kind, ...DEFAULT_PORTS[kind], problems: [], ...extra };
    if (kind === "tool" && !data.connectionId && bridge.connections.length === 1) data.connectionId = bridge.connections[0];
    setNodes([...nodes.map((n) => (n.selected ? { ...n, selected: false } : n)), { id, type: "bridgeNode", position, data, selected: true }]);
    setSelectedId(id);
  };
  const selected = nodes.find((n) => n.id === selectedId) || null;
  const changeSelected = (patch) => {
    setNodes((ns) => ns.map((n) => {
      if (n.id !== selectedId) return n;
      const data = { ...n.data, ...patch };
      for (const [k, v] of Object.entries(patch)) if (v === undefined) delete data[k];
      return { ...n, data };
    }));
    if (patch.inputs || patch.outputs) {  // drop the edges of ports that went away
      setEdges((es) => es.filter((e) => {
        if (e.target === selectedId && patch.inputs) return patch.inputs.includes(e.targetHandle.slice(IN.length));
        if (e.source === selectedId && patch.outputs) return patch.outputs.includes(e.sourceHandle.slice(OUT.length));
        return true;
      }));
    }
  };
  const wire = (port, source) => {  // the inspector's "fed by": replace the one edge into `port`
    setEdges((es) => {
      const rest = es.filter((e) => e !== edgeInto(es, selectedId, IN + port));
      if (!source) return rest;
      const dot = source.lastIndexOf(".");
      const c = { source: source.slice(0, dot), sourceHandle: OUT + source.slice(dot + 1), target: selectedId, targetHandle: IN + port };
      const why = refusal(rest, c);
      if (why) { setStatus({ error: true, text: why }); return es; }
      return [...rest, { ...c, id: freshId("e", new Set(es.map((e) => e.id))), markerEnd: ARROW }];
    });
  };
  const deleteSelected = () => {
    setNodes((ns) => ns.filter((n) => n.id !== selectedId));
    setEdges((es) => es.filter((e) => e.source !== selectedId && e.target !== selectedId));
    setSelectedId(null);
  };

  const markProblems = (found) => {
    const byId = new Map();
    for (const p of found) for (const id of new Set(p.ids)) byId.set(id, [...(byId.get(id) || []), p.message]);
    setNodes((ns) => ns.map((n) => ({ ...n, data: { ...n.data, problems: byId.get(n.id) || [] } })));
    setEdges((es) => es.map((e) => {
      const messages = byId.get(e.id);
      return { ...e, className: messages ? "has-problem" : undefined, label: messages ? messages.join("; ") : undefined };
    }));
    setProblemMap(byId);
    // an edge to a missing node or port cannot be drawn: its problem is listed above the canvas
    const drawn = new Set(edges.filter((e) => drawable(e, nodes)).map((e) => e.id));
    const placed = new Set([...nodes.map((n) => n.id), ...pipelines.map((p) => p.id), ...drawn]);
    setProblems(found.filter((p) => !p.ids.some((id) => placed.has(id))));
  };
  const markWarnings = (warnings) => {  // saved, but e.g. the connection could not be asked for its tools
    const byNode = new Map();
    for (const w of warnings) if (w.node) byNode.set(w.node, [...(byNode.get(w.node) || []), w.message]);
    setNodes((ns) => ns.map((n) => {
      const found = byNode.get(n.id);
      if (!found && !n.data.warnings) return n;
      const data = { ...n.data, warnings: found };
      if (!found) delete data.warnings;
      return { ...n, data };
    }));
  };
  const save = async ({ overwrite = false } = {}) => {
    setStatus(null);
    const graph = fromFlow(nodes, edges, pipelines);
    try {
      let tag = etag;
      if (overwrite) tag = (await request("GET", graphPath)).etag;  // over whatever is saved now
      const saved = await request("PUT", graphPath, graph, tag ? { "if-match": tag } : {});
      markProblems([]);
      markWarnings(saved.data?.warnings || []);
      setConflict(null);
      setEtag(saved.etag);
      setSavedJson(canon(graph));
      setBridge(await api("GET", itemPath("bridges", bridgeId, owner)));  // its pipelines, as saved
      const warnings = saved.data?.warnings || [];
      setStatus({ error: false, text: warnings.length ? `Saved, with warnings: ${warnings.map((w) => w.message || w).join("; ")}` : "Saved." });
    } catch (e) {
      if (e.status === 409 || e.status === 412) {
        setConflict(e.message);
        setStatus({ error: true, text: "Not saved: someone else saved this graph meanwhile." });
        return;
      }
      markProblems(e.problems || []);
      setStatus({ error: true, text: `Not saved: ${e.message}` });
    }
  };
  const reload = async () => {
    try {
      const g = await request("GET", graphPath);
      show(g.data, g.etag);
      setStatus({ error: false, text: "Reloaded: the graph as saved now." });
    } catch (e) { setStatus({ error: true, text: e.message }); }
  };
  const restore = async (version) => {
    if (dirty && !window.confirm(`Restore version ${version}? The unsaved edits on the canvas are lost.`)) return;
    try {
      const g = await request("POST", itemPath("bridges", bridgeId, owner, `/graph/versions/${version}/restore`), undefined, etag ? { "if-match": etag } : {});
      show(g.data, g.etag);
      setBridge(await api("GET", itemPath("bridges", bridgeId, owner)));
      setStatus({ error: false, text: `Restored version ${version} (saved as the newest version).` });
    } catch (e) {
      if (e.status === 409 || e.status === 412) setConflict(e.message);
      setStatus({ error: true, text: `Not restored: ${e.message}` });
    }
  };
  const exportGraph = () => {
    const blob = new Blob([JSON.stringify(fromFlow(nodes, edges, pipelines), null, 2)], { type: "application/json" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = `${bridgeId}.graph.json`;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  };
  const importGraph = async (e) => {
    const file = e.target.files?.[0];
    e.target.value = "";
    if (!file) return;
    try {
      const g = toFlow(parseGraphFile(await file.text()));
      setNodes(g.nodes); setEdges(g.edges); setPipelines(g.pipelines); setSelectedId(null); setFit(g.nodes.length > 0);
      setStatus({ error: false, text: `Imported ${file.name}: not saved yet (Save checks and keeps it; Ctrl+Z undoes).` });
    } catch (err) {
      setStatus({ error: true, text: `Not imported: ${err.message}` });
    }
  };
  const infer = useCallback(async (pipeline) => {
    const answer = await optional("GET", itemPath("bridges", bridgeId, owner, "/graph/inferred-inputs", { pipeline }));
    return answer === null ? null : answer.inputs || {};
  }, [bridgeId, owner]);

  const runs = useMemo(() => new Map(runNodes(lastRun).map((n) => [n.id, n])), [lastRun]);
  const shown = useMemo(() => nodes.map((n) => {
    const broken = brokenReason(n, bridge, connections);
    const run = runs.get(n.id);
    return broken || run ? { ...n, data: { ...n.data, broken, run } } : n;
  }), [nodes, bridge, connections, runs]);

  if (!bridge) return <main className="page">{status && <p className="error">{status.text}</p>}</main>;
  const h = history.current;
  return (
    <main className="editor">
      <div className="toolbar">
        <a href="#/connections">← Bridges</a>
        <strong>Bridge {bridge.id}</strong> <code>{bridge.mcpPath}</code>
        {["input", "tool", "merge", "output"].map((k) => <button key={k} onClick={() => addNode(k)}>+ {k}</button>)}
        <Palette connections={bridge.connections} toolsOf={toolsOf} onAdd={addNode} />
        <button onClick={undo} disabled={!h.past.length} title="Undo (Ctrl+Z)">Undo</button>
        <button onClick={redo} disabled={!h.future.length} title="Redo (Ctrl+Shift+Z, Ctrl+Y)">Redo</button>
        <button onClick={exportGraph}>Export</button>
        <label className="button file">Import<input type="file" name="import-graph" accept="application/json,.json" onChange={importGraph} /></label>
        <button onClick={() => setShowVersions((v) => !v)} aria-pressed={showVersions}>Versions</button>
        <button className="primary" onClick={() => save()}>Save</button>
        {dirty && <span className="unsaved" data-testid="unsaved">unsaved edits</span>}
        {status && <span role="status" className={status.error ? "error" : "ok"}>{status.text}</span>}
      </div>
      {conflict && (
        <div className="conflict" role="alert" data-testid="conflict">
          <p><strong>Someone else saved this graph while you were editing it.</strong> Reload to see theirs (your edits here are dropped), or overwrite theirs with yours.</p>
          <p className="hint">{conflict}</p>
          <button onClick={reload}>Reload</button>
          <button className="danger" onClick={() => save({ overwrite: true })}>Overwrite</button>
        </div>
      )}
      {problems.length > 0 && <ul className="error" data-testid="graph-problems">{problems.map((p, i) => <li key={i}>{p.message}</li>)}</ul>}
      <div className="workspace">
        <div className="canvas" data-testid="canvas">
          <ReactFlow
            nodes={shown} edges={edges} nodeTypes={nodeTypes}
            onNodesChange={onNodesChange} onEdgesChange={onEdgesChange} onConnect={onConnect}
            isValidConnection={isValidConnection} deleteKeyCode={["Delete", "Backspace"]}
            onNodeClick={(_, n) => setSelectedId(n.id)} onPaneClick={() => setSelectedId(null)}
            onSelectionChange={({ nodes: picked }) => { if (picked.length === 1) setSelectedId(picked[0].id); }}
            onNodesDelete={(gone) => { if (gone.some((n) => n.id === selectedId)) setSelectedId(null); }}
          >
            <Background /><Controls />
          </ReactFlow>
        </div>
        <div className="side">
          {showVersions && <Versions bridgeId={bridge.id} owner={owner} current={etag ? Number(etag.replaceAll('"', "")) : 0} onRestore={restore} />}
          <Inspector node={selected} nodes={nodes} edges={edges} connections={bridge.connections} toolsOf={toolsOf}
            onData={changeSelected} onDelete={deleteSelected} onWire={wire} broken={selected ? brokenReason(selected, bridge, connections) : null} />
          <Pipelines pipelines={pipelines} setPipelines={setPipelines} nodes={nodes} problemsOf={(id) => problemMap.get(id) || []} infer={infer} />
          <TryPanel bridgeId={bridge.id} owner={owner} pipelines={bridge.pipelines.length ? pipelines.filter((p) => bridge.pipelines.includes(p.name)) : []}
            nodes={nodes} onRun={setLastRun} />
        </div>
      </div>
    </main>
  );
}

export function GraphEditor({ bridgeId, owner }) {
  return <ReactFlowProvider><Editor bridgeId={bridgeId} owner={owner} /></ReactFlowProvider>;
}
