"""Rate limits and spend budgets (O2): per API key, user, org and route, shared by every replica
through Redis (or per process without it).

`config` holds the `limits:` section, `buckets` the pure arithmetic (GCRA, budget periods, the
`x-ratelimit-*` headers), `counters` the in-process counters, `redis_counters` the same semantics
as Lua scripts in Redis, and `gate` what the request engine calls: `admit` before the upstream,
`Admission.end` when the request ends.
"""
