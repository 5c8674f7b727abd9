// C4: the account's audit records — newest first, filtered, paged, read-only.
import { useEffect, useState } from "react";
import { api, localTime, timeZone } from "./api.js";

const PAGE = 20;
const FILTERS = ["action", "resource", "scope", "status"];

/** Why a record failed: its own reason, or its failed nodes' (a pipeline run). */
function reasonOf(r) {
  const run = r.args?.$run;  // a pipeline run's record: {reason, nodes: [{id, status, reason, durationMs}]}
  if (r.reason) return r.reason;
  if (typeof run?.reason === "string") return run.reason;
  const nodes = [run?.nodes, r.nodes].find(Array.isArray) || [];
  const failed = nodes.filter((n) => n && n.status === "failed");
  return failed.map((n) => `${n.id}: ${n.reason || "failed"}`).join("; ") || (typeof r.error === "string" ? r.error : "");
}

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
      if (!v) continue;
      // a picker's value is a time in the browser's zone, as the rows show them (`new Date` reads it so)
      // (until takes the whole of its second: a row shown at that time is in)
      if (k === "since") query.set(k, new Date(v).toISOString());
      else if (k === "until") query.set(k, new Date(new Date(v).getTime() + 999).toISOString());
      else if (v) query.set(k, v);
    }
    if (before !== null) query.set("before", String(before));
    api("GET", `/audit?${query}`)
      .then((r) => { setRecords(r.data.slice(0, PAGE)); setMore(r.data.length > PAGE); setError(null); })
      .catch((e) => setError(e.message));
  }, [applied, before, asked]);

  const apply = (e) => { e.preventDefault(); setApplied(filters); setPages([null]); setAsked((n) => n + 1); };

  const zone = timeZone();
  return (
    <main className="page">
      <h2>Audit Logs</h2>
      <p className="hint" data-testid="zone">Times are in your browser's zone, {zone}.</p>
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
        <label className="field"><span>since ({zone})</span><input type="datetime-local" step="1" name="since" value={filters.since} onChange={(e) => setFilters({ ...filters, since: e.target.value })} /></label>
        <label className="field"><span>until ({zone})</span><input type="datetime-local" step="1" name="until" value={filters.until} onChange={(e) => setFilters({ ...filters, until: e.target.value })} /></label>
        <button type="submit">Filter</button>
      </form>
      {error && <p className="error" role="alert">{error}</p>}
      <div className="scroll"><table className="list audit" data-testid="audit">
        <thead><tr><th>time ({zone})</th><th>action</th><th>actor</th><th>resource</th><th>scope</th><th>mutating</th><th>status</th><th>ms</th><th>reason</th><th>args</th></tr></thead>
        <tbody>
          {records.map((r) => (
            <tr key={r.seq} data-seq={r.seq}>
              <td className="time" title={new Date(r.ts * 1000).toISOString()}>{localTime(new Date(r.ts * 1000))}</td>
              <td>{r.action}</td><td>{r.actor.email || r.actor.id}</td><td>{r.resource}</td><td>{r.scope}</td>
              <td>{r.mutating ? "yes" : "no"}</td><td className={r.status}>{r.status}</td><td>{r.duration_ms}</td>
              <td className="reason">{reasonOf(r)}</td>
              <td className="args"><code>{JSON.stringify(r.args)}</code></td>
            </tr>
          ))}
        </tbody>
      </table></div>
      {records.length === 0 && <p className="hint">No records.</p>}
      <nav className="pager">
        <button disabled={pages.length === 1} onClick={() => setPages(pages.slice(0, -1))}>Newer</button>
        <span>page {pages.length}</span>
        <button disabled={!more} onClick={() => setPages([...pages, records[records.length - 1].seq])}>Older</button>
      </nav>
    </main>
  );
}
