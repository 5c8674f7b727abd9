"""Configuration of one prompt_guard node (P4). Extended by the prompt_guard implementation."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class PromptGuardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["prompt_guard"]
    id: str = "prompt_guard"
    mode: Literal["enforce", "monitor"] = "enforce"
