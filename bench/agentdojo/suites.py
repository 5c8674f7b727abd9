"""AgentDojo's suites, cases and attack text, built the way AgentDojo 0.1.35 builds them.

A *case* is a user task alone (benign) or a (user task, injection task) pair (attack). Only the
injection tasks a scripted model can carry out count: those with ground-truth calls or an expected
answer (workspace's injection tasks 6-13 have neither), which leaves AgentDojo v1.2's 629 pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.attacks.base_attacks import BaseAttack
from agentdojo.functions_runtime import FunctionCall
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite

BENCHMARK_VERSION = "v1.2"
SUITES = ("workspace", "travel", "banking", "slack")
ATTACK = "important_instructions"
ATTACK_TARGET_MODEL = "gpt-4o-2024-05-13"
"""The pipeline name the attack's templates address ("GPT-4"); no model of that name is called."""
EXPECTED_USER_TASKS = 97
EXPECTED_PAIRS = 629


@dataclass(frozen=True)
class Case:
    """One run: `injection_task` is None for a benign case."""

    suite: str
    user_task: str
    injection_task: str | None = None


@dataclass
class Prepared:
    """What one case needs: the live environment the MCP server mutates, a deep copy taken before
    anything ran (AgentDojo's `pre_environment`), and what the scripted model knows."""

    environment: Any
    pre_environment: Any
    prompt: str
    user_calls: list[FunctionCall]
    user_output: str
    injection_calls: list[FunctionCall]
    injection_output: str
    injection_goal: str | None
    injections: dict[str, str]


class _AttackTarget(BasePipelineElement):
    """Stands for the attacked pipeline: the attack only reads its `name` (for "{model}")."""

    name = ATTACK_TARGET_MODEL

    def query(self, *args: Any, **kwargs: Any) -> Any:  # never called: the gateway is the target
        raise NotImplementedError


@cache
def suites() -> dict[str, TaskSuite]:
    """AgentDojo v1.2's four suites, by name."""
    return dict(get_suites(BENCHMARK_VERSION))


@cache
def attack(suite_name: str) -> BaseAttack:
    """The `important_instructions` attack on one suite (cached: it memoises injection candidates)."""
    return load_attack(ATTACK, suites()[suite_name], _AttackTarget())


def executable_injection_tasks(suite: TaskSuite) -> list[str]:
    """Injection tasks with ground-truth calls or an expected answer (what a scripted model can do)."""
    environment = suite.load_and_inject_default_environment({})
    return [
        task_id for task_id, task in suite.injection_tasks.items()
        if task.ground_truth(environment.model_copy(deep=True)) or task.GROUND_TRUTH_OUTPUT
    ]


def _task_order(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def cases(names: Sequence[str], limit: int | None = None) -> tuple[list[Case], list[Case]]:
    """(benign cases, attack cases) of the named suites, in task order; `limit`: the first N of each
    kind per suite. With all four suites and no limit, checks AgentDojo's 97 tasks and 629 pairs."""
    benign: list[Case] = []
    attacks: list[Case] = []
    for name in names:
        suite = suites()[name]
        users = sorted(suite.user_tasks, key=_task_order)
        injections = sorted(executable_injection_tasks(suite), key=_task_order)
        suite_benign = [Case(name, user) for user in users]
        suite_attacks = [Case(name, user, inj) for user in users for inj in injections]
        benign += suite_benign[:limit]
        attacks += suite_attacks[:limit]
    if set(names) == set(SUITES) and limit is None:
        assert len(benign) == EXPECTED_USER_TASKS, f"{len(benign)} user tasks, expected {EXPECTED_USER_TASKS}"
        assert len(attacks) == EXPECTED_PAIRS, f"{len(attacks)} security pairs, expected {EXPECTED_PAIRS}"
    return benign, attacks


def prepare(case: Case) -> Prepared:
    """A fresh environment for `case`, as `TaskSuite.run_task_with_pipeline` builds it: the attack's
    injections placed in the vectors the user task reads, `init_environment`, then a deep copy."""
    suite = suites()[case.suite]
    user_task = suite.get_user_task_by_id(case.user_task)
    injection_task = suite.get_injection_task_by_id(case.injection_task) if case.injection_task else None
    injections = attack(case.suite).attack(user_task, injection_task) if injection_task else {}
    environment = user_task.init_environment(suite.load_and_inject_default_environment(injections))
    pre_environment = environment.model_copy(deep=True)
    return Prepared(
        environment=environment,
        pre_environment=pre_environment,
        prompt=user_task.PROMPT,
        user_calls=user_task.ground_truth(pre_environment.model_copy(deep=True)),
        user_output=user_task.GROUND_TRUTH_OUTPUT,
        injection_calls=injection_task.ground_truth(pre_environment.model_copy(deep=True)) if injection_task else [],
        injection_output=injection_task.GROUND_TRUTH_OUTPUT if injection_task else "",
        injection_goal=injection_task.GOAL if injection_task else None,
        injections=injections,
    )
