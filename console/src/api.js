// The Bridge's REST API as the console calls it: same origin, the session cookie, and the
// session's CSRF token (from the page's <meta>) on every change.
const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

export class ApiError extends Error {
  constructor(status, error, body) {
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.problems = problemsOf(error, body);
  }
}

/** The server's problems with a graph, one shape: {ids, message}. It names them as
 * `error.problems: [{ids, message}]`, or (one per element) `errors: [{node, edge, message}]`. */
function problemsOf(error, body) {
  if (error?.problems?.length) return error.problems;
  return [...(error?.errors || []), ...(body?.errors || [])]
    .map((e) => ({ ids: [e.node, e.edge, e.pipeline].filter(Boolean), message: e.message }));
}

/** A request answering {data, etag}; `headers` adds request headers (If-Match). */
export async function request(method, path, body, headers = {}) {
  const sent = { accept: "application/json", ...headers };
  if (method !== "GET") sent["x-csrf-token"] = csrf();
  if (body !== undefined) sent["content-type"] = "application/json";
  const response = await fetch(path, {
    method, headers: sent, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    window.location.assign("/console");  // the session ended: back to the sign-in page
    throw new ApiError(401, { message: "signed out" });
  }
  let data = null;
  if (response.status !== 204) {
    try { data = await response.json(); } catch { data = null; }
  }
  if (!response.ok) throw new ApiError(response.status, data?.error, data);
  return { data, etag: response.headers.get("etag") };
}

export async function api(method, path, body) {
  return (await request(method, path, body)).data;
}

/** A route the server may not have yet: its answer, or null on 404/405 (the feature is hidden). */
export async function optional(method, path, body) {
  try {
    return await api(method, path, body);
  } catch (e) {
    if (e.status === 404 || e.status === 405) return null;
    throw e;
  }
}

export const owners = () =>
  document.querySelector('meta[name="console-owners"]').content.split(",").filter(Boolean);

// An item's path: ids are per owner, and `?owner=` names the one meant even where the caller's own
// item of that id would shadow the org's (docs/bridge.md, "Ids are per owner").
export const itemPath = (kind, id, owner, rest = "", query = {}) => {
  const params = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null));
  if (owner) params.set("owner", owner);
  const q = params.toString();
  return `/${kind}/${encodeURIComponent(id)}${rest}${q ? `?${q}` : ""}`;
};

/** Local time, to the second, as `YYYY-MM-DD HH:MM:SS` (the format the datetime pickers take). */
export function localTime(date) {
  const p = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())} ${p(date.getHours())}:${p(date.getMinutes())}:${p(date.getSeconds())}`;
}

export const timeZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
