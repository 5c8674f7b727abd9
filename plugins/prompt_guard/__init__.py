"""prompt_guard: inspects tool results, prefetch results and resources for prompt injection.

Layout: `normalize` (text folding), `rulepack` (YAML rules), `heuristics` (structure),
`classifier` (local linear model), `scanner` (scoring and verdicts), `plugin` (the gateway
node), `evaluation` + `cli` (`toolgate guard eval`). The offline data and training scripts are in the
repository's top-level `training/` folder, outside this package and the wheel.
"""
