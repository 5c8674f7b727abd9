// The selected node's inspector: its label, a tool node's connection, tool and constant arguments
// (typed from the tool's input schema), the ports of input, merge and output nodes, and what feeds
// each input port (a way to wire the graph without a mouse).
import { useEffect, useState } from "react";
import { IN, OUT, closesCycle, edgeInto } from "./graph.js";

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

const typeOf = (schema) => (Array.isArray(schema?.type) ? schema.type.find((t) => t !== "null") : schema?.type) || "json";

/** One constant argument, typed from its schema: text, number, true/false, or JSON. */
function Constant({ name, schema, value, onChange }) {
  const type = typeOf(schema);
  const [text, setText] = useState(value === undefined ? "" : JSON.stringify(value, null, 0));
  const [bad, setBad] = useState(null);
  useEffect(() => { setText(value === undefined ? "" : JSON.stringify(value)); }, [value]);
  const field = `const-${name}`;
  if (type === "string") {
    return <input name={field} value={value ?? ""} placeholder="(not set)" onChange={(e) => onChange(e.target.value === "" ? undefined : e.target.value)} />;
  }
  if (type === "number" || type === "integer") {
    return <input name={field} type="number" step={type === "integer" ? 1 : "any"} value={value ?? ""} placeholder="(not set)"
      onChange={(e) => onChange(e.target.value === "" ? undefined : Number(e.target.value))} />;
  }
  if (type === "boolean") {
    return (
      <select name={field} value={value === undefined ? "" : String(value)} onChange={(e) => onChange(e.target.value === "" ? undefined : e.target.value === "true")}>
        <option value="">(not set)</option><option value="true">true</option><option value="false">false</option>
      </select>
    );
  }
  const commit = () => {
    if (text.trim() === "") { setBad(null); onChange(undefined); return; }
    try { onChange(JSON.parse(text)); setBad(null); } catch (e) { setBad(`not JSON: ${e.message}`); }
  };
  return <>
    <textarea name={field} rows={2} value={text} placeholder={`(not set; JSON ${type})`} onChange={(e) => setText(e.target.value)} onBlur={commit} />
    {bad && <span className="error" role="alert">{bad}</span>}
  </>;
}

function ToolFields({ node, edges, connections, tools, toolsError, onData }) {
  const { data } = node;
  const tool = tools?.find((t) => t.name === data.tool);
  const schema = tool?.inputSchema || {};
  const properties = schema.properties || {};
  const required = new Set(schema.required || []);
  const chooseTool = (name) => {
    const chosen = tools.find((t) => t.name === name);
    const inputs = Object.keys(chosen?.inputSchema?.properties || {});
    onData({ tool: name || undefined, inputs, outputs: ["result"], config: undefined });
  };
  const setConstant = (name, value) => {
    const config = { ...(data.config || {}) };
    if (value === undefined) delete config[name]; else config[name] = value;
    onData({ config: Object.keys(config).length ? config : undefined });
  };
  let placeholder;
  if (!data.connectionId) placeholder = "(choose a connection first)";
  else if (toolsError) placeholder = "(its tools could not be listed)";
  else if (tools === null) placeholder = "loading tools…";
  else if (tools.length === 0) placeholder = "(this connection offers no tools)";
  else placeholder = `(choose one of ${tools.length} tools)`;
  const listed = tools || [];
  return <>
    <label className="field"><span>connection</span>
      <select name="connection" value={data.connectionId || ""} onChange={(e) => onData({ connectionId: e.target.value || undefined, tool: undefined, inputs: [], config: undefined })}>
        {!data.connectionId && <option value="">(choose a connection)</option>}
        {data.connectionId && !connections.includes(data.connectionId) && <option value={data.connectionId}>{data.connectionId} (not in this bridge)</option>}
        {connections.map((c) => <option key={c} value={c}>{c}</option>)}
      </select>
    </label>
    <label className="field"><span>tool</span>
      <select name="tool" value={data.tool || ""} onChange={(e) => chooseTool(e.target.value)}>
        {!data.tool && <option value="">{placeholder}</option>}
        {data.tool && !tool && <option value={data.tool}>{tools ? `${data.tool} (not offered by ${data.connectionId})` : data.tool}</option>}
        {listed.map((t) => <option key={t.name} value={t.name}>{t.name}</option>)}
      </select>
    </label>
    {toolsError && <p className="error" role="alert">{toolsError}</p>}
    {toolsError && (  // the server cannot be asked now: the tool may still be named by hand
      <label className="field"><span>tool name (typed: its tools could not be listed)</span>
        <input name="tool-name" value={data.tool || ""} onChange={(e) => onData({ tool: e.target.value || undefined })} />
      </label>
    )}
    {tool?.description && <p className="hint">{tool.description}</p>}
    {Object.keys(properties).length > 0 && (
      <fieldset className="constants" data-testid="constants"><legend>arguments (wired, or a constant)</legend>
        {Object.entries(properties).map(([name, prop]) => {
          const wired = edgeInto(edges, node.id, IN + name);
          return (
            <label key={name} className="field">
              <span>{name}{required.has(name) ? " *" : ""} <em>{typeOf(prop)}</em>{prop.description ? ` — ${prop.description}` : ""}</span>
              {wired
                ? <span className="hint">wired from {wired.source}.{wired.sourceHandle.slice(OUT.length)}</span>
                : <Constant name={name} schema={prop} value={data.config?.[name]} onChange={(v) => setConstant(name, v)} />}
            </label>
          );
        })}
      </fieldset>
    )}
    {!tool && <p className="hint">A tool's input ports come from its input schema: {data.inputs.join(", ") || "none"}.</p>}
  </>;
}

/** What feeds each input port: a select per port (the keyboard's way to draw and remove edges). */
function Wiring({ node, nodes, edges, onWire }) {
  if (!node.data.inputs.length) return null;
  const sources = nodes.filter((n) => n.id !== node.id).flatMap((n) => n.data.outputs.map((p) => ({ node: n.id, port: p })));
  return (
    <fieldset className="wiring"><legend>inputs fed by</legend>
      {node.data.inputs.map((port) => {
        const e = edgeInto(edges, node.id, IN + port);
        const value = e ? `${e.source}.${e.sourceHandle.slice(OUT.length)}` : "";
        return (
          <label key={port} className="field"><span>{port}</span>
            <select name={`wire-${port}`} value={value} onChange={(ev) => onWire(port, ev.target.value)}>
              <option value="">(not wired)</option>
              {sources.filter((s) => `${s.node}.${s.port}` === value || !closesCycle(edges.filter((x) => x !== e), s.node, node.id))
                .map((s) => <option key={`${s.node}.${s.port}`} value={`${s.node}.${s.port}`}>{s.node}.{s.port}</option>)}
            </select>
          </label>
        );
      })}
    </fieldset>
  );
}

export function Inspector({ node, nodes, edges, connections, toolsOf, onData, onDelete, onWire, broken }) {
  const [tools, setTools] = useState(null);
  const [toolsError, setToolsError] = useState(null);
  const connectionId = node?.data.kind === "tool" ? node.data.connectionId : undefined;
  useEffect(() => {
    setTools(null); setToolsError(null);
    if (!connectionId) return undefined;
    let live = true;
    toolsOf(connectionId).then((t) => live && setTools(t), (e) => live && setToolsError(e.message));
    return () => { live = false; };
  }, [connectionId, toolsOf]);
  if (!node) {
    return <aside className="inspector"><p className="hint">Select a node to edit it (click it, or Tab to it and press Enter); drag from an output port to an input port to connect them, or pick what feeds a port in the inspector. Delete or Backspace removes the selected node or edge; Ctrl+Z undoes, Ctrl+Shift+Z or Ctrl+Y redoes.</p></aside>;
  }
  const { data } = node;
  return (
    <aside className="inspector" data-testid="inspector">
      <h3>{data.kind} {node.id}</h3>
      {broken && <p className="error" role="alert">{broken}</p>}
      <label className="field"><span>label</span><input name="label" value={data.label || ""} onChange={(e) => onData({ label: e.target.value || undefined })} /></label>
      {data.kind === "tool" && <ToolFields node={node} edges={edges} connections={connections} tools={tools} toolsError={toolsError} onData={onData} />}
      {data.kind === "input" && <PortList title="arguments" ports={data.outputs} onChange={(outputs) => onData({ outputs })} />}
      {(data.kind === "output" || data.kind === "merge") && <PortList title="inputs" ports={data.inputs} onChange={(inputs) => onData({ inputs })} />}
      <Wiring node={node} nodes={nodes} edges={edges} onWire={onWire} />
      <button className="danger" onClick={onDelete}>Delete node</button>
    </aside>
  );
}
