// C4: the account's audit records — newest first, filtered, paged, read-only.
import { useEffect, useState } from "react";
import { api } from "./api.js";

const PAGE = 20;
const FILTERS = ["action", "resource", "scope", "status"];

export function AuditView() {
  const [filters, setFilters] = useState({ action: "", resource: "", scope: "", status: "", since: "", until: "" });
  const [applied, setApplied] = useState(filters);
  const [pages, setPages] = useState([null]);  // the `before` cursor of each page seen
  const [records, setRecords] = useState([]);
  const [more, setMore] = useState(false);
  const [error, setError] = useState(null);
  const [asked, setAsked] = useState(0);  // each Filter click reads the log again, even with the same filters
  const before = pages[pages.length - 1];

  useEffect(() => {
    const query = new URLSearchParams({ limit: String(PAGE + 1) });
    for (const [k, v] of Object.entries(applied)) {
      if (v) query.set(k, k === "since" || k === "until" ? new Date(v).toISOString() : v);
    }
    if (before !== null) query.set("before", String(before));
    api("GET", `/audit?${query}`)
      .then((r) => { setRecords(r.data.slice(0, PAGE)); setMore(r.data.length > PAGE); setError(null); })
      .catch((e) => setError(e.message));
  }, [applied, before, asked]);

  const apply = (e) => { e.preventDefault(); setApplied(filters); setPages([null]); setAsked((n) => n + 1); };

  return (
    <main className="page">
      <h2>Audit Logs</h2>
      <form className="inline" onSubmit={apply} aria-label="filters">
        {FILTERS.map((f) => (
          <label key={f} className="field"><span>{f}</span>
            {f === "status"
              ? <select name="status" value={filters.status} onChange={(e) => setFilters({ ...filters, status: e.target.value })}>
                  <option value="">any</option><option value="success">success</option><option value="failure">failure</option>
                </select>
              : <input name={f} value={filters[f]} onChange={(e) => setFilters({ ...filters, [f]: e.target.value })} />}
          </label>
        ))}
        <label className="field"><span>since</span><input type="datetime-local" name="since" value={filters.since} onChange={(e) => setFilters({ ...filters, since: e.target.value })} /></label>
        <label className="field"><span>until</span><input type="datetime-local" name="until" value={filters.until} onChange={(e) => setFilters({ ...filters, until: e.target.value })} /></label>
        <button type="submit">Filter</button>
      </form>
      {error && <p className="error" role="alert">{error}</p>}
      <table className="list" data-testid="audit">
        <thead><tr><th>time</th><th>action</th><th>actor</th><th>resource</th><th>scope</th><th>mutating</th><th>status</th><th>ms</th><th>args</th></tr></thead>
        <tbody>
          {records.map((r) => (
            <tr key={r.seq} data-seq={r.seq}>
              <td>{new Date(r.ts * 1000).toISOString().replace("T", " ").slice(0, 19)}</td>
              <td>{r.action}</td><td>{r.actor.email || r.actor.id}</td><td>{r.resource}</td><td>{r.scope}</td>
              <td>{r.mutating ? "yes" : "no"}</td><td className={r.status}>{r.status}</td><td>{r.duration_ms}</td>
              <td><code>{JSON.stringify(r.args)}</code></td>
            </tr>
          ))}
        </tbody>
      </table>
      {records.length === 0 && <p className="hint">No records.</p>}
      <nav className="pager">
        <button disabled={pages.length === 1} onClick={() => setPages(pages.slice(0, -1))}>Newer</button>
        <span>page {pages.length}</span>
        <button disabled={!more} onClick={() => setPages([...pages, records[records.length - 1].seq])}>Older</button>
      </nav>
    </main>
  );
}
