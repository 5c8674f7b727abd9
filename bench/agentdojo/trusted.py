"""Checks the per-suite tables of `annotations`: every served tool is classified, and no trusted
source ever returns text from an injection vector.

Every vector of the suite gets a distinct canary at once; each trusted tool runs on that
environment with every argument set any task's ground truth uses for it, plus arguments that make
it return everything it can (an empty search query, every channel). A canary in any output means
third parties can write into that source, so it must not be trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionsRuntime

from bench.agentdojo.annotations import ANNOTATIONS, TRUSTED_SOURCES
from bench.agentdojo.suites import suites

_EVERYTHING: dict[str, Callable[[Any], list[dict[str, Any]]]] = {
    "search_contacts_by_name": lambda env: [{"query": ""}],
    "search_contacts_by_email": lambda env: [{"query": ""}, {"query": "@"}],
    "get_users_in_channel": lambda env: [{"channel": channel} for channel in env.slack.channels],
}
"""Arguments that make a trusted tool return all it holds."""


def _argument_sets(suite_name: str, tool: str, environment: Any) -> list[dict[str, Any]]:
    suite = suites()[suite_name]
    seen: list[dict[str, Any]] = [dict(a) for a in _EVERYTHING.get(tool, lambda env: [{}])(environment)]
    for task in [*suite.user_tasks.values(), *suite.injection_tasks.values()]:
        for call in task.ground_truth(environment.model_copy(deep=True)):
            if call.function == tool and dict(call.args) not in seen:
                seen.append(dict(call.args))
    return seen


def verify(suite_name: str) -> list[str]:
    """Problems found for one suite (empty when its tables hold); also returns the calls checked."""
    suite = suites()[suite_name]
    problems: list[str] = []
    served = {tool.name for tool in suite.tools}
    table = set(ANNOTATIONS[suite_name])
    if served != table:
        problems.append(f"{suite_name}: annotation table differs from the tools: missing {sorted(served - table)}, "
                        f"extra {sorted(table - served)}")
    canaries = {vector: f"CANARY<{vector}>" for vector in suite.get_injection_vector_defaults()}
    environment = suite.load_and_inject_default_environment(canaries)
    runtime = FunctionsRuntime(suite.tools)
    for tool in TRUSTED_SOURCES[suite_name]:
        if tool not in served:
            problems.append(f"{suite_name}: trusted source {tool} is not a tool of the suite")
            continue
        if not ANNOTATIONS[suite_name][tool].read_only:
            problems.append(f"{suite_name}: trusted source {tool} is not read-only")
        for args in _argument_sets(suite_name, tool, environment):
            result, error = runtime.run_function(environment.model_copy(deep=True), tool, args)
            text = tool_result_to_str(result) + (error or "")
            leaked = [vector for vector, canary in canaries.items() if canary in text]
            if leaked:
                problems.append(f"{suite_name}: trusted source {tool}({args}) returns injection vectors {leaked}")
    return problems


def verify_all(names: list[str]) -> None:
    """Raises when any suite's tables are wrong (run before every benchmark)."""
    problems = [problem for name in names for problem in verify(name)]
    if problems:
        raise SystemExit("annotation / trusted-source tables are wrong:\n  " + "\n  ".join(problems))
