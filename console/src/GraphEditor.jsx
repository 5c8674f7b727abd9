// C3: one bridge's graph on a React Flow canvas, its inspector, pipelines, save and try.
import { useCallback, useEffect, useMemo, useState } from "react";
import {
  Background, Controls, Handle, Position, ReactFlow, ReactFlowProvider, addEdge,
  useEdgesState, useNodesInitialized, useNodesState, useReactFlow, useUpdateNodeInternals,
} from "@xyflow/react";
import { api, itemPath } from "./api.js";
import { ARROW, IN, OUT, closesCycle, drawable, freshId, fromFlow, toFlow } from "./graph.js";

const DEFAULT_PORTS = {
  input: { inputs: [], outputs: ["query"] },
  tool: { inputs: [], outputs: ["result"] },
  merge: { inputs: ["a", "b"], outputs: ["merged"] },
  output: { inputs: ["result"], outputs: [] },
};
const ID_PREFIX = { input: "in", tool: "t", merge: "m", output: "out" };

function BridgeNode({ id, data, selected }) {
  const update = useUpdateNodeInternals();
  const ports = `${data.inputs.join(",")}|${data.outputs.join(",")}`;
  useEffect(() => { update(id); }, [id, ports, update]);
  const rows = Math.max(data.inputs.length, data.outputs.length);
  return (
    <div className={`bridge-node kind-${data.kind}${data.problems.length ? " has-problem" : ""}${selected ? " selected" : ""}`}>
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
      {data.problems.map((p, i) => <div className="problem" role="alert" key={i}>{p}</div>)}
    </div>
  );
}
const nodeTypes = { bridgeNode: BridgeNode };

function PortList({ title, ports, onChange }) {
  const [name, setName] = useState("");
  const add = (e) => {
    e.preventDefault();
    if (name && !ports.includes(name)) onChange([...ports, name]);
    setName("");
  };
  return (
    <div className="port-list">
      <h4>{title}</h4>
      <ul>{ports.map((p) => (
        <li key={p}>{p} <button aria-label={`remove port ${p}`} onClick={() => onChange(ports.filter((x) => x !== p))}>×</button></li>
      ))}</ul>
      <form onSubmit={add}><input name={`new-${title}`} value={name} placeholder="port name" onChange={(e) => setName(e.target.value)} /><button type="submit">Add port</button></form>
    </div>
  );
}

function Inspector({ node, connections, toolsOf, onData, onDelete }) {
  const [tools, setTools] = useState([]);
  const [error, setError] = useState(null);
  const connectionId = node?.data.connectionId;
  useEffect(() => {
    setTools([]);
    if (node?.data.kind === "tool" && connectionId) {
      toolsOf(connectionId).then(setTools, (e) => setError(e.message));
    }
  }, [node?.id, node?.data.kind, connectionId, toolsOf]);
  if (!node) return <aside className="inspector"><p className="hint">Select a node to edit it; drag from an output port to an input port to connect them.</p></aside>;
  const { data } = node;
  const chooseTool = (name) => {
    const tool = tools.find((t) => t.name === name);
    const inputs = Object.keys(tool?.inputSchema?.properties || {});
    onData({ tool: name, inputs, outputs: ["result"] });
  };
  return (
    <aside className="inspector" data-testid="inspector">
      <h3>{data.kind} {node.id}</h3>
      <label className="field"><span>label</span><input name="label" value={data.label || ""} onChange={(e) => onData({ label: e.target.value })} /></label>
      {data.kind === "tool" && <>
        <label className="field"><span>connection</span>
          <select name="connection" value={data.connectionId || ""} onChange={(e) => onData({ connectionId: e.target.value, tool: undefined, inputs: [] })}>
            <option value="">(choose)</option>
            {connections.map((c) => <option key={c} value={c}>{c}</option>)}
          </select>
        </label>
        <label className="field"><span>tool</span>
          <select name="tool" value={data.tool || ""} onChange={(e) => chooseTool(e.target.value)}>
            <option value="">(choose)</option>
            {tools.map((t) => <option key={t.name} value={t.name}>{t.name}</option>)}
          </select>
        </label>
        {error && <p className="error">{error}</p>}
        <p className="hint">A tool's input ports come from its input schema: {data.inputs.join(", ") || "none"}.</p>
      </>}
      {data.kind === "input" && <PortList title="arguments" ports={data.outputs} onChange={(outputs) => onData({ outputs })} />}
      {(data.kind === "output" || data.kind === "merge") && <PortList title="inputs" ports={data.inputs} onChange={(inputs) => onData({ inputs })} />}
      <button className="danger" onClick={onDelete}>Delete node</button>
    </aside>
  );
}

function Pipelines({ pipelines, setPipelines, nodes, problemsOf }) {
  const ids = (kind) => nodes.filter((n) => n.data.kind === kind).map((n) => n.id);
  const change = (i, patch) => setPipelines(pipelines.map((p, j) => (i === j ? { ...p, ...patch } : p)));
  const add = () => setPipelines([...pipelines, {
    id: freshId("p", new Set(pipelines.map((p) => p.id))), name: "", inputNode: ids("input")[0] || "", outputNode: ids("output")[0] || "",
  }]);
  return (
    <section className="pipelines" data-testid="pipelines">
      <h4>Pipelines</h4>
      {pipelines.map((p, i) => (
        <div className="pipeline" key={p.id}>
          <input name={`pipeline-name-${i}`} value={p.name} placeholder="name" onChange={(e) => change(i, { name: e.target.value })} />
          <select name={`pipeline-input-${i}`} value={p.inputNode} onChange={(e) => change(i, { inputNode: e.target.value })}>
            {ids("input").map((id) => <option key={id}>{id}</option>)}
          </select>
          →
          <select name={`pipeline-output-${i}`} value={p.outputNode} onChange={(e) => change(i, { outputNode: e.target.value })}>
            {ids("output").map((id) => <option key={id}>{id}</option>)}
          </select>
          <button aria-label={`remove pipeline ${p.name}`} onClick={() => setPipelines(pipelines.filter((_, j) => j !== i))}>×</button>
          {problemsOf(p.id).map((m, k) => <div className="problem" role="alert" key={k}>{m}</div>)}
        </div>
      ))}
      <button onClick={add}>Add pipeline</button>
    </section>
  );
}

function TryPanel({ bridgeId, owner, pipelines, nodes }) {
  const [name, setName] = useState("");
  const [args, setArgs] = useState("{}");
  const [result, setResult] = useState(null);
  const chosen = pipelines.find((p) => p.name === name) || pipelines[0];
  const input = nodes.find((n) => n.id === chosen?.inputNode);
  useEffect(() => {
    if (input) setArgs(JSON.stringify(Object.fromEntries(input.data.outputs.map((p) => [p, ""]))));
  }, [input?.id, input?.data.outputs.join(",")]);  // eslint-disable-line react-hooks/exhaustive-deps
  const run = async (e) => {
    e.preventDefault();
    setResult(null);
    try {
      const answer = await api("POST", itemPath("bridges", bridgeId, owner, "/run"), { name: chosen.name, arguments: JSON.parse(args) });
      setResult(answer);
    } catch (err) {
      setResult({ isError: true, text: err.message });
    }
  };
  if (!pipelines.length) return null;
  return (
    <form className="try" onSubmit={run} aria-label="try">
      <h4>Try a saved pipeline</h4>
      <select name="try-pipeline" value={chosen?.name || ""} onChange={(e) => setName(e.target.value)}>
        {pipelines.map((p) => <option key={p.id} value={p.name}>{p.name}</option>)}
      </select>
      <textarea name="try-arguments" value={args} rows={3} onChange={(e) => setArgs(e.target.value)} />
      <button type="submit">Run</button>
      {result && <pre data-testid="try-result" className={result.isError ? "error" : "ok"}>{result.text}</pre>}
    </form>
  );
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
  const initialized = useNodesInitialized();
  const flow = useReactFlow();
  useEffect(() => {  // a saved graph is fitted into view once its nodes are measured; a new one starts at scale 1
    if (fit && initialized) { flow.fitView({ maxZoom: 1, padding: 0.1 }); setFit(false); }
  }, [fit, initialized, flow]);
  const toolCache = useMemo(() => new Map(), []);

  useEffect(() => {
    Promise.all([api("GET", itemPath("bridges", bridgeId, owner)), api("GET", itemPath("bridges", bridgeId, owner, "/graph"))])
      .then(([b, g]) => {
        const loaded = toFlow(g);
        setFit(loaded.nodes.length > 0);
        setBridge(b); setNodes(loaded.nodes); setEdges(loaded.edges); setPipelines(loaded.pipelines);
      })
      .catch((e) => setStatus({ error: true, text: e.message }));
  }, [bridgeId, owner, setNodes, setEdges]);

  const toolsOf = useCallback((connectionId) => {
    if (!toolCache.has(connectionId)) {
      // an org bridge names the org's connections only; a user's, the user's own before the org's
      const among = bridge?.owner.startsWith("org:") ? bridge.owner : undefined;
      toolCache.set(connectionId, api("GET", itemPath("connections", connectionId, among, "/tools")).then((r) => r.data));
    }
    return toolCache.get(connectionId);
  }, [toolCache, bridge?.owner]);

  const isValidConnection = useCallback((c) => {
    if (closesCycle(edges, c.source, c.target)) {
      setStatus({ error: true, text: `refused: an edge from ${c.source} to ${c.target} would close a cycle` });
      return false;
    }
    return true;
  }, [edges]);
  const onConnect = useCallback((c) => {
    setEdges((es) => addEdge({ ...c, id: freshId("e", new Set(es.map((e) => e.id))), markerEnd: ARROW }, es));
    setStatus(null);
  }, [setEdges]);

  const addNode = (kind) => {
    const id = freshId(ID_PREFIX[kind], new Set(nodes.map((n) => n.id)));
    const position = { x: 60 + (nodes.length % 4) * 230, y: 40 + Math.floor(nodes.length / 4) * 170 };
    setNodes([...nodes, { id, type: "bridgeNode", position, data: { kind, ...DEFAULT_PORTS[kind], problems: [] } }]);
    setSelectedId(id);
  };
  const selected = nodes.find((n) => n.id === selectedId) || null;
  const changeSelected = (patch) => {
    setNodes((ns) => ns.map((n) => (n.id === selectedId ? { ...n, data: { ...n.data, ...patch } } : n)));
    if (patch.inputs || patch.outputs) {  // drop the edges of ports that went away
      setEdges((es) => es.filter((e) => {
        if (e.target === selectedId && patch.inputs) return patch.inputs.includes(e.targetHandle.slice(IN.length));
        if (e.source === selectedId && patch.outputs) return patch.outputs.includes(e.sourceHandle.slice(OUT.length));
        return true;
      }));
    }
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
  const save = async () => {
    setStatus(null);
    try {
      await api("PUT", itemPath("bridges", bridgeId, owner, "/graph"), fromFlow(nodes, edges, pipelines));
      markProblems([]);
      setBridge(await api("GET", itemPath("bridges", bridgeId, owner)));  // its pipelines, as saved
      setStatus({ error: false, text: "Saved." });
    } catch (e) {
      markProblems(e.problems || []);
      setStatus({ error: true, text: `Not saved: ${e.message}` });
    }
  };

  if (!bridge) return <main className="page">{status && <p className="error">{status.text}</p>}</main>;
  return (
    <main className="editor">
      <div className="toolbar">
        <a href="#/connections">← Bridges</a>
        <strong>Bridge {bridge.id}</strong> <code>{bridge.mcpPath}</code>
        {["input", "tool", "merge", "output"].map((k) => <button key={k} onClick={() => addNode(k)}>+ {k}</button>)}
        <button className="primary" onClick={save}>Save</button>
        {status && <span role="status" className={status.error ? "error" : "ok"}>{status.text}</span>}
      </div>
      {problems.length > 0 && <ul className="error" data-testid="graph-problems">{problems.map((p, i) => <li key={i}>{p.message}</li>)}</ul>}
      <div className="workspace">
        <div className="canvas" data-testid="canvas">
          <ReactFlow
            nodes={nodes} edges={edges} nodeTypes={nodeTypes}
            onNodesChange={onNodesChange} onEdgesChange={onEdgesChange} onConnect={onConnect}
            isValidConnection={isValidConnection}
            onNodeClick={(_, n) => setSelectedId(n.id)} onPaneClick={() => setSelectedId(null)}
          >
            <Background /><Controls />
          </ReactFlow>
        </div>
        <div className="side">
          <Inspector node={selected} connections={bridge.connections} toolsOf={toolsOf} onData={changeSelected} onDelete={deleteSelected} />
          <Pipelines pipelines={pipelines} setPipelines={setPipelines} nodes={nodes} problemsOf={(id) => problemMap.get(id) || []} />
          <TryPanel bridgeId={bridge.id} owner={owner} pipelines={bridge.pipelines.length ? pipelines.filter((p) => bridge.pipelines.includes(p.name)) : []} nodes={nodes} />
        </div>
      </div>
    </main>
  );
}

export function GraphEditor({ bridgeId, owner }) {
  return <ReactFlowProvider><Editor bridgeId={bridgeId} owner={owner} /></ReactFlowProvider>;
}
