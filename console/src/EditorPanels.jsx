// The editor's side panels: pipelines (name, ends, description, typed inputs), trying a saved
// pipeline (each node's status, input and output; the pipeline's recent runs), and the graph's
// saved versions (list, view, restore).
import { useCallback, useEffect, useState } from "react";
import { api, itemPath, localTime, optional, timeZone } from "./api.js";
import { freshId } from "./graph.js";

const TYPES = ["", "string", "number", "integer", "boolean", "object", "array"];

function TypedInputs({ pipeline, ports, onChange, infer, index }) {
  const inputs = pipeline.inputs || {};
  const required = new Set(pipeline.required || []);
  const [note, setNote] = useState(null);
  const setType = (port, type) => {
    const next = { ...inputs };
    if (type) next[port] = { ...(inputs[port] || {}), type }; else delete next[port];
    onChange({ inputs: Object.keys(next).length ? next : undefined });
  };
  const setRequired = (port, on) => {
    const next = new Set(required);
    if (on) next.add(port); else next.delete(port);
    onChange({ required: next.size ? ports.filter((p) => next.has(p)) : undefined });
  };
  const inferNow = async () => {
    setNote(null);
    try {
      const found = await infer(pipeline.name);
      if (found === null) { setNote("nothing to infer from yet: save the pipeline first"); return; }
      const next = { ...inputs };
      for (const [port, schema] of Object.entries(found)) if (ports.includes(port) && Object.keys(schema || {}).length) next[port] = schema;
      onChange({ inputs: Object.keys(next).length ? next : undefined });
      setNote(`inferred from the wiring: ${Object.keys(found).join(", ") || "nothing"} (editable)`);
    } catch (e) { setNote(e.message); }
  };
  return (
    <details className="typed-inputs" onToggle={(e) => {  // opened with no types yet: prefilled from the wiring
      if (e.currentTarget.open && !pipeline.inputs && pipeline.name) inferNow();
    }}>
      <summary>inputs: {ports.map((p) => `${p}${inputs[p]?.type ? `: ${inputs[p].type}` : ""}${required.has(p) ? " *" : ""}`).join(", ") || "none"}</summary>
      {ports.map((port) => (
        <div className="typed-input" key={port}>
          <span>{port}</span>
          <select name={`pipeline-type-${index}-${port}`} aria-label={`type of ${port}`} value={inputs[port]?.type || ""} onChange={(e) => setType(port, e.target.value)}>
            {TYPES.map((t) => <option key={t} value={t}>{t || "(any)"}</option>)}
          </select>
          <label className="check"><input type="checkbox" name={`pipeline-required-${index}-${port}`} checked={required.has(port)} onChange={(e) => setRequired(port, e.target.checked)} />required</label>
        </div>
      ))}
      <button type="button" onClick={inferNow} disabled={!pipeline.name}>Infer types</button>
      {note && <p className="hint" data-testid="infer-note">{note}</p>}
    </details>
  );
}

export function Pipelines({ pipelines, setPipelines, nodes, problemsOf, infer }) {
  const ids = (kind) => nodes.filter((n) => n.data.kind === kind).map((n) => n.id);
  const change = (i, patch) => setPipelines(pipelines.map((p, j) => {
    if (i !== j) return p;
    const next = { ...p, ...patch };
    for (const [k, v] of Object.entries(patch)) if (v === undefined) delete next[k];
    return next;
  }));
  const add = () => setPipelines([...pipelines, {
    id: freshId("p", new Set(pipelines.map((p) => p.id))), name: "", inputNode: ids("input")[0] || "", outputNode: ids("output")[0] || "",
  }]);
  const remove = (i) => {
    const p = pipelines[i];
    if (window.confirm(`Remove pipeline ${p.name || p.id}? (Nothing is saved until Save.)`)) setPipelines(pipelines.filter((_, j) => j !== i));
  };
  return (
    <section className="pipelines" data-testid="pipelines">
      <h4>Pipelines</h4>
      {pipelines.map((p, i) => {
        const ports = nodes.find((n) => n.id === p.inputNode)?.data.outputs || [];
        return (
          <div className="pipeline" key={p.id}>
            <div className="pipeline-row">
              <input name={`pipeline-name-${i}`} value={p.name} placeholder="name" aria-label="pipeline name" onChange={(e) => change(i, { name: e.target.value })} />
              <select name={`pipeline-input-${i}`} aria-label="input node" value={p.inputNode} onChange={(e) => change(i, { inputNode: e.target.value })}>
                {ids("input").map((id) => <option key={id}>{id}</option>)}
              </select>
              →
              <select name={`pipeline-output-${i}`} aria-label="output node" value={p.outputNode} onChange={(e) => change(i, { outputNode: e.target.value })}>
                {ids("output").map((id) => <option key={id}>{id}</option>)}
              </select>
              <button aria-label={`remove pipeline ${p.name}`} onClick={() => remove(i)}>×</button>
            </div>
            <input className="wide" name={`pipeline-description-${i}`} value={p.description || ""} placeholder="description (what agents see in tools/list)"
              onChange={(e) => change(i, { description: e.target.value || undefined })} />
            <TypedInputs pipeline={p} ports={ports} index={i} infer={infer} onChange={(patch) => change(i, patch)} />
            {problemsOf(p.id).map((m, k) => <div className="problem" role="alert" key={k}>{m}</div>)}
          </div>
        );
      })}
      <button onClick={add}>Add pipeline</button>
    </section>
  );
}

const blank = { string: "", number: 0, integer: 0, boolean: false, object: {}, array: [] };
const pretty = (v) => (v === undefined ? "" : JSON.stringify(v, null, 2));

function NodeRuns({ nodes }) {
  return (
    <table className="list node-runs" data-testid="node-runs">
      <thead><tr><th>node</th><th>status</th><th>ms</th><th>reason / data</th></tr></thead>
      <tbody>
        {nodes.map((n) => (
          <tr key={n.id} data-node={n.id} className={`run-${n.status}`}>
            <td>{n.id}{n.tool ? ` · ${n.tool}` : ""}</td>
            <td className={n.status === "failed" ? "failure" : n.status === "ok" ? "success" : "hint"}>{n.status}</td>
            <td>{n.durationMs === undefined || n.durationMs === null ? "" : Math.round(n.durationMs)}</td>
            <td>
              {n.reason && <div className="reason">{n.reason}</div>}
              {(n.input !== undefined || n.output !== undefined) && (
                <details><summary>input and output</summary>
                  <div className="io"><strong>input</strong><pre data-testid={`node-input-${n.id}`}>{pretty(n.input)}</pre></div>
                  <div className="io"><strong>output</strong><pre data-testid={`node-output-${n.id}`}>{pretty(n.output)}</pre></div>
                </details>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function RunHistory({ runs }) {
  if (runs === null) return null;
  return (
    <div className="run-history" data-testid="run-history">
      <h5>Recent runs <span className="hint">({timeZone()})</span></h5>
      {runs.length === 0 && <p className="hint">No runs yet.</p>}
      <ul>
        {runs.map((r, i) => (
          <li key={i} className={r.isError ? "failure" : "success"}>
            <span>{localTime(new Date(r.at))}</span> {r.isError ? "failed" : "ok"} {r.durationMs !== undefined ? `${Math.round(r.durationMs)} ms` : ""}
            {r.caller ? ` · ${r.caller}` : ""}
            {r.reason && <div className="reason">{r.reason}</div>}
            <div className="hint">{(r.nodes || []).map((n) => `${n.id}: ${n.status}${typeof n.durationMs === "number" ? ` ${Math.round(n.durationMs)} ms` : ""}`).join(", ")}</div>
          </li>
        ))}
      </ul>
    </div>
  );
}

export function TryPanel({ bridgeId, owner, pipelines, nodes, onRun }) {
  const [name, setName] = useState("");
  const [args, setArgs] = useState("{}");
  const [result, setResult] = useState(null);
  const [runs, setRuns] = useState(null);
  const chosen = pipelines.find((p) => p.name === name) || pipelines[0];
  const input = nodes.find((n) => n.id === chosen?.inputNode);
  useEffect(() => {
    if (input) setArgs(JSON.stringify(Object.fromEntries(input.data.outputs.map((p) => [p, blank[chosen?.inputs?.[p]?.type] ?? ""]))));
  }, [input?.id, input?.data.outputs.join(","), chosen?.name]);  // eslint-disable-line react-hooks/exhaustive-deps
  /** The pipeline's recent runs; `since` (ms): a run started then has just ended, and its audit
   * record is written a moment later — asked again (briefly, a few times) until the list has it. */
  const loadRuns = useCallback(async (pipeline, since = null) => {
    if (!pipeline) return;
    for (let attempt = 0; attempt < (since === null ? 1 : 10); attempt++) {
      if (attempt) await new Promise((resolve) => { setTimeout(resolve, 300); });
      let answer;
      try {
        answer = await optional("GET", itemPath("bridges", bridgeId, owner, "/runs", { pipeline, limit: 10 }));
      } catch { setRuns(null); return; }
      setRuns(answer === null ? null : answer.data);
      const newest = answer?.data[0] ? Date.parse(answer.data[0].at) : NaN;
      if (answer === null || since === null || newest >= since) return;  // (a server clock behind: asked until the last try)
    }
  }, [bridgeId, owner]);
  useEffect(() => { loadRuns(chosen?.name); }, [chosen?.name, loadRuns]);
  const run = async (e) => {
    e.preventDefault();
    setResult(null);
    let parsed;
    try { parsed = JSON.parse(args); } catch (err) { setResult({ isError: true, text: `The arguments are not JSON: ${err.message}` }); return; }
    const started = Date.now();
    let answer;
    try {
      answer = await api("POST", itemPath("bridges", bridgeId, owner, "/run"), { name: chosen.name, arguments: parsed });
    } catch (err) {
      answer = { isError: true, text: err.message };
    }
    setResult(answer);
    onRun(answer);
    loadRuns(chosen.name, started);
  };
  if (!pipelines.length) return null;
  return (
    <form className="try" onSubmit={run} aria-label="try">
      <h4>Try a saved pipeline</h4>
      <select name="try-pipeline" value={chosen?.name || ""} onChange={(e) => setName(e.target.value)}>
        {pipelines.map((p) => <option key={p.id} value={p.name}>{p.name}</option>)}
      </select>
      {chosen?.description && <p className="hint">{chosen.description}</p>}
      <textarea name="try-arguments" value={args} rows={3} onChange={(e) => setArgs(e.target.value)} />
      <button type="submit">Run</button>
      {result && <pre data-testid="try-result" className={result.isError ? "error" : "ok"}>{result.text}</pre>}
      {result?.nodes?.length > 0 && <NodeRuns nodes={result.nodes} />}
      <RunHistory runs={runs} />
    </form>
  );
}

export function Versions({ bridgeId, owner, current, onRestore }) {
  const [versions, setVersions] = useState(undefined);  // undefined: loading; null: not offered
  const [viewed, setViewed] = useState(null);
  const [error, setError] = useState(null);
  const base = (rest) => itemPath("bridges", bridgeId, owner, `/graph/versions${rest}`);
  const load = useCallback(async () => {
    try {
      const answer = await optional("GET", base(""));
      setVersions(answer === null ? null : answer.data);
    } catch (e) { setError(e.message); setVersions([]); }
  }, [bridgeId, owner, current]);  // eslint-disable-line react-hooks/exhaustive-deps
  useEffect(() => { load(); }, [load]);
  if (versions === undefined) return null;
  if (versions === null) return <section className="versions"><h4>Versions</h4><p className="hint">This gateway keeps no graph versions.</p></section>;
  const view = async (v) => {
    setError(null);
    try { setViewed({ version: v, graph: await api("GET", base(`/${v}`)) }); } catch (e) { setError(e.message); }
  };
  return (
    <section className="versions" data-testid="versions">
      <h4>Versions <span className="hint">({timeZone()})</span></h4>
      {error && <p className="error" role="alert">{error}</p>}
      <table className="list">
        <thead><tr><th>v</th><th>saved</th><th>by</th><th>size</th><th></th></tr></thead>
        <tbody>
          {versions.map((v) => (
            <tr key={v.version} data-version={v.version}>
              <td>{v.version}{v.version === current ? " (current)" : ""}</td>
              <td>{v.savedAt ? localTime(new Date(typeof v.savedAt === "number" ? v.savedAt * 1000 : v.savedAt)) : ""}</td><td>{v.savedBy}</td>
              <td>{v.nodes ?? "?"} nodes, {v.edges ?? "?"} edges</td>
              <td>
                <button onClick={() => view(v.version)}>View</button>
                {v.version !== current && <button onClick={() => onRestore(v.version)}>Restore</button>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {viewed && (
        <div className="viewed" data-testid="version-view">
          <strong>version {viewed.version}</strong> <button onClick={() => setViewed(null)}>Close</button>
          <pre>{JSON.stringify(viewed.graph, null, 2)}</pre>
        </div>
      )}
    </section>
  );
}
