"""The one MCP client layer (ARCHITECTURE "MCP client"), used by plugins/mcp_bridge and the Bridge.

- `target`: what to connect to (HTTP in both protocol generations, or stdio), the auth header from
  a secret, the shared HTTP clients, the discovery cache and stale-session watching.
- `connection`: one session owned by its own task (a dying server never cancels a caller).
- `pool`: sessions by slot, idle-closed, an ended session replaced and the call retried once (B16).
- `operations`: paginated listings and calls, run on a connection.
- `lean`: a relayed tool call on an open HTTP session in one POST, without the SDK's transport.
- `errors`: why a call failed, as short secret-free text; what counts as an ended session.
"""
