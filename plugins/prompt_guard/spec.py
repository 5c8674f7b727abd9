"""prompt_guard's declaration to the gateway's registry: its config model and a lazy factory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.plugins import Plugin, PluginSpec
from plugins.prompt_guard.config import PromptGuardConfig


def _build(config: PromptGuardConfig) -> Plugin:
    from plugins.prompt_guard.plugin import PromptGuardPlugin

    return PromptGuardPlugin(config)


def _commands(sub: Any, load_config: Callable[[str], Any]) -> None:
    from plugins.prompt_guard.cli import register

    register(sub, load_config)


SPEC = PluginSpec(type="prompt_guard", config=PromptGuardConfig, factory=_build, commands=_commands)
