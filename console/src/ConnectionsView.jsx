// C2: the connections and bridges of the account and its org — list, create, edit, delete.
import { useCallback, useEffect, useState } from "react";
import { api, itemPath, owners } from "./api.js";

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
const editorHash = (b) => `#/bridges/${encodeURIComponent(b.id)}?owner=${encodeURIComponent(b.owner)}`;

export function ConnectionsView() {
  const [connections, setConnections] = useState([]);
  const [bridges, setBridges] = useState([]);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState(null);
  const [conn, setConn] = useState(blankConnection);
  const [editingConn, setEditingConn] = useState(null);
  const [bridge, setBridge] = useState(blankBridge);
  const [editingBridge, setEditingBridge] = useState(null);

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
        <table className="list" data-testid="connections">
          <thead><tr><th>id</th><th>owner</th><th>endpoint</th><th>prefix</th><th>credential</th><th>source</th><th></th></tr></thead>
          <tbody>
            {connections.map((c) => (
              <tr key={`${c.owner} ${c.id}`} data-id={c.id} data-owner={c.owner}>
                <td>{c.id}</td><td>{c.owner}</td><td>{c.endpoint}</td><td>{c.prefix}</td>
                <td>{c.authHeaderName ? `${c.authHeaderName}: (set, never shown)` : "none"}</td><td>{c.source}</td>
                <td>{c.source === "api" && <>
                  <button onClick={() => { setEditingConn(c); setConn({ id: c.id, endpoint: c.endpoint, prefix: c.prefix, owner: c.owner, header: c.authHeaderName || "", secret: "" }); }}>Edit</button>
                  <button onClick={() => act(() => api("DELETE", itemPath("connections", c.id, c.owner)))}>Delete</button>
                </>}</td>
              </tr>
            ))}
          </tbody>
        </table>
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
        <table className="list" data-testid="bridges">
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
                    <button onClick={() => act(() => api("DELETE", itemPath("bridges", b.id, b.owner)))}>Delete</button>
                  </>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
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
