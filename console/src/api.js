// The Bridge's REST API as the console calls it: same origin, the session cookie, and the
// session's CSRF token (from the page's <meta>) on every change.
const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.problems = error?.problems || [];
  }
}

export async function api(method, path, body) {
  const headers = { accept: "application/json" };
  if (method !== "GET") headers["x-csrf-token"] = csrf();
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    window.location.assign("/console");  // the session ended: back to the sign-in page
    throw new ApiError(401, { message: "signed out" });
  }
  const data = response.status === 204 ? null : await response.json();
  if (!response.ok) throw new ApiError(response.status, data?.error);
  return data;
}

export const owners = () =>
  document.querySelector('meta[name="console-owners"]').content.split(",").filter(Boolean);

// An item's path: ids are per owner, and `?owner=` names the one meant even where the caller's own
// item of that id would shadow the org's (docs/bridge.md, "Ids are per owner").
export const itemPath = (kind, id, owner, rest = "") =>
  `/${kind}/${encodeURIComponent(id)}${rest}${owner ? `?owner=${encodeURIComponent(owner)}` : ""}`;
