"""prompt_guard: inspects tool results, prefetch results and resources for prompt injection.

Layout: `normalize` (text folding), `rulepack` (YAML rules), `heuristics` (structure),
`classifier` (local linear model), `scanner` (scoring and verdicts), `plugin` (the gateway
node), `evaluation` + `cli` (`toolgate guard eval`), `training/` (offline data and training).
"""
