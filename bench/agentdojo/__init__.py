"""AgentDojo v1.2 through the real gateway, with a worst-case scripted model (issue 31, SPEC T7).

Modules: `suites` (tasks, cases, the attack), `annotations` (the MCP tool annotations and the
operator-trusted sources per suite), `mcp_server` (each suite's tools over Streamable HTTP),
`scripted_model` (the upstream that obeys every injection), `gateway_proc` (one gateway
subprocess per configuration), `runner` (one case: send, confirm, judge), `report` (tables, files).
The entry point is `bench/agentdojo_bench.py`.
"""
