// C2: the connections and bridges of the account and its org — list, create, edit, delete.
import { useCallback, useEffect, useState } from "react";
import { api, itemPath, localTime, owners, timeZone } from "./api.js";

function Field({ label, children }) {
  return <label className="field"><span>{label}</span>{children}</label>;
}

function OwnerSelect({ value, onChange, name }) {
  return (
    <select name={name} value={value} onChange={(e) => onChange(e.target.value)}>
      {owners().map((o) => <option key={o} value={o}>{o}</option>)}
    </select>
  );
}

const blankConnection = () => ({ id: "", endpoint: "", prefix: "", owner: owners()[0], header: "", secret: "" });
const blankBridge = () => ({ id: "", owner: owners()[0], connections: [] });
/** A connection's health: ok, or the error of its last check, and when that was. */
function Health({ health }) {
  if (!health) return <span className="hint">not checked</span>;
  const when = health.checkedAt ? ` · ${localTime(new Date(health.checkedAt))}` : "";
  return health.ok
    ? <span className="success" title={`checked ${when}`}>ok<span className="hint">{when}</span></span>
    : <span className="failure">failing: {health.error || "unreachable"}<span className="hint">{when}</span></span>;
}

/** "Test": connect, list the tools (with the latency), and call one with JSON arguments. */
function ConnectionTest({ connection, onClose, onTested }) {
  const [answer, setAnswer] = useState(null);
  const [error, setError] = useState(null);
  const [tool, setTool] = useState("");
  const [args, setArgs] = useState("{}");
  const [called, setCalled] = useState(null);
  const path = (rest) => itemPath("connections", connection.id, connection.owner, rest);
  useEffect(() => {
    let live = true;
    api("POST", path("/test")).then((a) => {
      if (!live) return;
      setAnswer(a);
      if (a.tools?.length) setTool(a.tools[0].name);
      onTested();
    }, (e) => live && setError(e.status === 404 || e.status === 405 ? "This gateway cannot test connections." : e.message));
    return () => { live = false; };
  }, [connection.id, connection.owner]);  // eslint-disable-line react-hooks/exhaustive-deps
  const chosen = answer?.tools?.find((t) => t.name === tool);
  useEffect(() => {  // the arguments' skeleton from the chosen tool's schema
    const props = chosen?.inputSchema?.properties || {};
    setArgs(JSON.stringify(Object.fromEntries(Object.keys(props).map((k) => [k, props[k].type === "string" ? "" : null])), null, 0));
  }, [chosen?.name]);  // eslint-disable-line react-hooks/exhaustive-deps
  const call = async (e) => {
    e.preventDefault();
    setCalled(null);
    let parsed;
    try { parsed = JSON.parse(args); } catch (err) { setCalled({ isError: true, text: `The arguments are not JSON: ${err.message}` }); return; }
    try { setCalled(await api("POST", path("/call"), { name: tool, arguments: parsed })); }
    catch (err) { setCalled({ isError: true, text: err.message }); }
  };
  return (
    <section className="connection-test" data-testid="connection-test" aria-label={`test ${connection.id}`}>
      <h3>Test {connection.id} <button type="button" onClick={onClose}>Close</button></h3>
      {!answer && !error && <p className="hint">Connecting…</p>}
      {error && <p className="error" role="alert">{error}</p>}
      {answer && (answer.ok
        ? <p className="success" data-testid="test-outcome">Reachable in {Math.round(answer.latencyMs)} ms; {answer.tools.length} tools.</p>
        : <p className="failure" data-testid="test-outcome">Failed: {answer.error}</p>)}
      {answer?.tools?.length > 0 && <>
        <ul className="tools" data-testid="test-tools">
          {answer.tools.map((t) => <li key={t.name}><code>{t.name}</code>{t.description ? ` — ${t.description}` : ""}</li>)}
        </ul>
        <form className="inline" onSubmit={call} aria-label="call a tool">
          <label className="field"><span>tool</span>
            <select name="test-tool" value={tool} onChange={(e) => setTool(e.target.value)}>
              {answer.tools.map((t) => <option key={t.name} value={t.name}>{t.name}</option>)}
            </select>
          </label>
          <label className="field grow"><span>arguments (JSON)</span>
            <textarea name="test-arguments" rows={2} value={args} onChange={(e) => setArgs(e.target.value)} />
          </label>
          <button type="submit">Call</button>
        </form>
        {called && <pre data-testid="test-result" className={called.isError ? "error" : "ok"}>{called.text || JSON.stringify(called.structuredContent)}</pre>}
      </>}
    </section>
  );
}

const editorHash = (b) => `#/bridges/${encodeURIComponent(b.id)}?owner=${encodeURIComponent(b.owner)}`;

const confirmed = (question) => window.confirm(question);

export function ConnectionsView() {
  const [connections, setConnections] = useState([]);
  const [bridges, setBridges] = useState([]);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState(null);
  const [conn, setConn] = useState(blankConnection);
  const [editingConn, setEditingConn] = useState(null);
  const [bridge, setBridge] = useState(blankBridge);
  const [editingBridge, setEditingBridge] = useState(null);
  const [testing, setTesting] = useState(null);

  const load = useCallback(async () => {
    const [c, b] = await Promise.all([api("GET", "/connections"), api("GET", "/bridges")]);
    setConnections(c.data);
    setBridges(b.data);
  }, []);
  useEffect(() => { load().catch((e) => setError(e.message)); }, [load]);

  const act = async (fn) => {
    setError(null);
    try { await fn(); await load(); } catch (e) { setError(e.message); }
  };

  // A credential is bound to the endpoint and header it was written for: the server drops it when
  // either changes unless the same save writes one again.
  const dropsCredential = !!editingConn?.authHeaderName && conn.secret === ""
    && (conn.endpoint !== editingConn.endpoint || (conn.header || "Authorization") !== editingConn.authHeaderName);
  const saveConnection = (e) => {
    e.preventDefault();
    act(async () => {
      const body = { endpoint: conn.endpoint };
      if (conn.prefix !== "") body.prefix = conn.prefix;
      if (conn.secret !== "") { body.authHeaderName = conn.header || "Authorization"; body.authSecret = conn.secret; }
      else if (dropsCredential && conn.endpoint === editingConn.endpoint) body.authHeaderName = null;  // a new header, no value
      let saved;
      if (editingConn) saved = await api("PATCH", itemPath("connections", editingConn.id, editingConn.owner), body);
      else await api("POST", "/connections", { ...body, id: conn.id, owner: conn.owner });
      setNotice(saved?.credential === "dropped" ? `Saved. The credential of ${saved.id} was dropped: it was written for the old endpoint. Write it again to send one.` : null);
      setConn(blankConnection()); setEditingConn(null);
    });
  };
  const saveBridge = (e) => {
    e.preventDefault();
    act(async () => {
      if (editingBridge) await api("PATCH", itemPath("bridges", editingBridge.id, editingBridge.owner), { connections: bridge.connections });
      else await api("POST", "/bridges", bridge);
      setBridge(blankBridge()); setEditingBridge(null);
    });
  };
  const toggle = (id) => setBridge((b) => ({
    ...b, connections: b.connections.includes(id) ? b.connections.filter((c) => c !== id) : [...b.connections, id],
  }));

  return (
    <main className="page">
      {error && <p className="error" role="alert">{error}</p>}
      {notice && <p className="hint" role="status">{notice}</p>}
      <section>
        <h2>Connections</h2>
        <div className="scroll"><table className="list" data-testid="connections">
          <thead><tr><th>id</th><th>owner</th><th>endpoint</th><th>prefix</th><th>credential</th><th>source</th><th>health <span className="hint">({timeZone()})</span></th><th></th></tr></thead>
          <tbody>
            {connections.map((c) => (
              <tr key={`${c.owner} ${c.id}`} data-id={c.id} data-owner={c.owner}>
                <td>{c.id}</td><td>{c.owner}</td><td>{c.endpoint}</td><td>{c.prefix}</td>
                <td>{c.authHeaderName ? `${c.authHeaderName}: (set, never shown)` : "none"}</td><td>{c.source}</td>
                <td className="health"><Health health={c.health} /></td>
                <td className="actions">
                  <button onClick={() => setTesting({ id: c.id, owner: c.owner })}>Test</button>
                  {c.source === "api" && <>
                  <button onClick={() => { setEditingConn(c); setConn({ id: c.id, endpoint: c.endpoint, prefix: c.prefix, owner: c.owner, header: c.authHeaderName || "", secret: "" }); }}>Edit</button>
                  <button onClick={() => confirmed(`Delete connection ${c.id} (${c.owner})? Bridges that use it stop reaching its tools.`) && act(() => api("DELETE", itemPath("connections", c.id, c.owner)))}>Delete</button>
                </>}</td>
              </tr>
            ))}
          </tbody>
        </table></div>
        {testing && <ConnectionTest key={`${testing.owner} ${testing.id}`} connection={testing} onClose={() => setTesting(null)} onTested={() => load().catch(() => {})} />}
        <form className="inline" onSubmit={saveConnection} aria-label="connection">
          <Field label="id"><input name="connection-id" value={conn.id} disabled={!!editingConn} required onChange={(e) => setConn({ ...conn, id: e.target.value })} /></Field>
          <Field label="endpoint"><input name="connection-endpoint" value={conn.endpoint} required onChange={(e) => setConn({ ...conn, endpoint: e.target.value })} /></Field>
          <Field label="prefix"><input name="connection-prefix" value={conn.prefix} placeholder="(its id)" onChange={(e) => setConn({ ...conn, prefix: e.target.value })} /></Field>
          <Field label="credential header"><input name="connection-header" value={conn.header} placeholder="Authorization" onChange={(e) => setConn({ ...conn, header: e.target.value })} /></Field>
          <Field label="credential (written once)"><input name="connection-secret" type="password" autoComplete="off" value={conn.secret} placeholder={editingConn ? "(unchanged)" : "(none)"} onChange={(e) => setConn({ ...conn, secret: e.target.value })} /></Field>
          {!editingConn && <Field label="owner"><OwnerSelect name="connection-owner" value={conn.owner} onChange={(owner) => setConn({ ...conn, owner })} /></Field>}
          {dropsCredential && <p className="error" role="alert" data-testid="credential-dropped">Changing the endpoint or the header drops the stored credential (it is sent only where it was written for): write it again here to keep one.</p>}
          <button type="submit">{editingConn ? "Save connection" : "Add connection"}</button>
          {editingConn && <button type="button" onClick={() => { setEditingConn(null); setConn(blankConnection()); }}>Cancel</button>}
        </form>
        <p className="hint">A credential is written once: the gateway seals it and never shows it again (here only whether one is set). Connections declared in the gateway's YAML name theirs by reference (<code>env:NAME</code>, <code>file:PATH</code>).</p>
      </section>
      <section>
        <h2>Bridges</h2>
        <div className="scroll"><table className="list" data-testid="bridges">
          <thead><tr><th>id</th><th>owner</th><th>connections</th><th>MCP endpoint</th><th>source</th><th></th></tr></thead>
          <tbody>
            {bridges.map((b) => (
              <tr key={`${b.owner} ${b.id}`} data-id={b.id} data-owner={b.owner}>
                <td><a href={editorHash(b)}>{b.id}</a></td><td>{b.owner}</td>
                <td>{b.connections.join(", ")}</td><td><code>{b.mcpPath}</code></td><td>{b.source}</td>
                <td>
                  <a className="button" href={editorHash(b)}>Edit graph</a>
                  {b.source === "api" && <>
                    <button onClick={() => { setEditingBridge(b); setBridge({ id: b.id, owner: b.owner, connections: b.connections }); }}>Edit</button>
                    <button onClick={() => confirmed(`Delete bridge ${b.id} (${b.owner}) and its graph? Its MCP endpoint ${b.mcpPath} goes away.`) && act(() => api("DELETE", itemPath("bridges", b.id, b.owner)))}>Delete</button>
                  </>}
                </td>
              </tr>
            ))}
          </tbody>
        </table></div>
        <form className="inline" onSubmit={saveBridge} aria-label="bridge">
          <Field label="id"><input name="bridge-id" value={bridge.id} disabled={!!editingBridge} required onChange={(e) => setBridge({ ...bridge, id: e.target.value })} /></Field>
          {!editingBridge && <Field label="owner"><OwnerSelect name="bridge-owner" value={bridge.owner} onChange={(owner) => setBridge({ ...bridge, owner })} /></Field>}
          <fieldset><legend>connections</legend>
            {[...new Set(connections.map((c) => c.id))].map((id) => (  // a bridge names connections by id
              <label key={id} className="check"><input type="checkbox" name={`bridge-conn-${id}`} checked={bridge.connections.includes(id)} onChange={() => toggle(id)} />{id}</label>
            ))}
          </fieldset>
          <button type="submit">{editingBridge ? "Save bridge" : "Add bridge"}</button>
          {editingBridge && <button type="button" onClick={() => { setEditingBridge(null); setBridge(blankBridge()); }}>Cancel</button>}
        </form>
      </section>
    </main>
  );
}
