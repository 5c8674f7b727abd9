"""Configuration of one prompt_guard node (P4): the keys a security team tunes in YAML.

Each route has its own chain, so each route's prompt_guard node has its own settings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plugins.prompt_guard.neural import DEFAULT_MAX_WINDOWS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AllowEntry(_Strict):
    """Items from this server (mcp_bridge node id) and/or tool/resource name are never blocked."""

    server: str | None = Field(default=None, description="an mcp_bridge node id (`client` for the client's messages)")
    tool: str | None = Field(default=None, description="tool name, resource URI/name, or message role")

    @model_validator(mode="after")
    def _one(self) -> "AllowEntry":
        if self.server is None and self.tool is None:
            raise ValueError("an allow entry needs 'server', 'tool' or both")
        return self

    def covers(self, server: str, source: str) -> bool:
        """True when an item from `server`/`source` falls under this entry."""
        return self.server in (None, server) and self.tool in (None, source)


class DetectorToggles(_Strict):
    """Turn whole detector families on or off."""

    rules: bool = Field(default=True, description="the rule pack's patterns (`rules_file`)")
    heuristics: bool = Field(default=True, description="the structural heuristics (e.g. hidden text, role markers)")
    classifier: bool = Field(default=True, description="the word n-gram model (`classifier`) and an operator's"
                             " `onnx_model` (`classifier.onnx`)")
    neural: bool = Field(default=True, description="the shipped neural model (`classifier.neural`)")


class NeuralConfig(_Strict):
    """The neural detector (P6): the model shipped in the package, or another one trained the same
    way (`training/neural.py`). Relative paths are read from the YAML config's folder."""

    model: Literal["default", "high_recall"] = Field(
        default="default",
        description="which shipped model: `default` (multilingual), or `high_recall` (English MiniLM: more recall, "
        "more false alarms; for monitor mode or a team that measured it on its own data)",
    )
    model_dir: str | None = Field(
        default=None, description="folder with model.onnx, tokenizer.json and model.json (or only a model.json of "
        "an ensemble, training/ensemble.py); replaces the shipped model"
    )
    max_windows: int = Field(
        default=DEFAULT_MAX_WINDOWS, ge=1, le=64,
        description="the model reads at most this many windows' worth of tokens (128 each) per item; a longer item "
        "is read at its head and tail (64 tokens each) and its most suspicious parts",
    )
    threshold: float | None = Field(
        default=None, gt=0, lt=1,
        description="model probability that counts as a block on its own; default: the one chosen on validation data",
    )


class OnnxModelConfig(_Strict):
    """An optional user-supplied ONNX classifier (needs `pip install 'toolgate[onnx]'`).

    Relative paths are read from the YAML config's folder, like `classifier_model`."""

    path: str = Field(description="the .onnx model file: a sequence classifier giving [batch, labels] logits")
    tokenizer: str = Field(description="the model's Hugging Face tokenizer.json")
    max_tokens: int = Field(default=512, ge=8, le=8192, description="tokens per model window, special tokens included")
    injection_label: int | list[int] = Field(
        default=1, description="index of the injection logit; a list sums several labels' probabilities"
    )
    weight: float = Field(default=1.0, gt=0, le=1, description="the probability is scaled by this in the noisy-OR")

    @model_validator(mode="after")
    def _check(self) -> "OnnxModelConfig":
        labels = [self.injection_label] if isinstance(self.injection_label, int) else self.injection_label
        if not labels or any(label < 0 for label in labels) or len(set(labels)) != len(labels):
            raise ValueError("injection_label must be a label index (>= 0) or a list of distinct ones")
        from plugins.prompt_guard.onnx_backend import EXTRA, missing_packages  # imports no optional package

        missing = missing_packages()
        if missing:
            raise ValueError(f"onnx_model needs the packages {', '.join(missing)}, which are not installed; "
                             f"install the optional extra: {EXTRA}")
        return self


class TrustedArgument(_Strict):
    """An argument whose value the firewall does not check (T3): e.g. `amount`, when the operator
    accepts that a tool result may set it."""

    tool: str = Field(description="the tool's name (as its server names it, or as the model sees it)")
    argument: str = Field(description="a top-level argument name")
    server: str | None = Field(default=None, description="only on this mcp_bridge node (`client` for the client's tools)")


class ConfirmationSettings(_Strict):
    """A held gateway call can be confirmed by the person (T4)."""

    enabled: bool = Field(default=True, description="offer confirmation of held calls; off: a held call is only refused")
    ttl_seconds: float = Field(default=300, gt=0, le=86400, description="how long a held call can be confirmed")


class EgressSettings(_Strict):
    """Links and images in the model's answer (T5)."""

    enabled: bool = Field(default=True, description="neutralise links and images that would carry data out (T5)")
    allowed_hosts: list[str] = Field(
        default_factory=list, description="hosts (and their subdomains) whose links and images are always kept")
    images: Literal["allowed_hosts", "keep"] = Field(
        default="allowed_hosts", description="allowed_hosts: an image to any other host is neutralised when the context "
        "holds untrusted data (a client fetches images without a click); keep: judged like links")


class FirewallConfig(_Strict):
    """The tool-call firewall (T1-T6): what untrusted data may make the model do."""

    enabled: bool = Field(default=True, description="in monitor mode the firewall only logs and counts what it would hold")
    block_threshold: float = Field(
        default=0.9, gt=0, le=1, description="detector score at or above which `enforce` refuses the request; between "
        "`threshold` and this, the item is flagged: no tool that acts runs without confirmation (T6)")
    client_tools: Literal["check", "trust"] = Field(
        default="check", description="check: the client's own tools are side-effecting and judged like gateway tools; "
        "trust: calls to them are never held")
    trusted_arguments: list[TrustedArgument] = Field(default_factory=list, description="arguments whose values the"
                                                     " firewall does not check (T3)")
    confirmations: ConfirmationSettings = Field(default_factory=ConfirmationSettings, description="confirming held"
                                                " calls (T4)")
    egress: EgressSettings = Field(default_factory=EgressSettings, description="links and images in the answer (T5)")
    spotlight: Literal["off", "delimit"] = Field(
        default="off", description="delimit: each tool result reaches the model between markers carrying a per-request "
        "random id, with a line saying it is data, not instructions")


class PromptGuardConfig(_Strict):
    """Inspects what tools, prefetch and resources bring into the context (P), and in `enforce`
    mode stops what an injection would make the model do (the tool-call firewall, T)."""

    type: Literal["prompt_guard"] = Field(description="always `prompt_guard`")
    id: str = Field(default="prompt_guard", description="node name: the `guard` label of its metrics and log lines;"
                    " unique within a chain")
    mode: Literal["enforce", "monitor"] = Field(
        default="enforce", description="enforce: a block refuses the request and the firewall holds calls; "
        "monitor: log and count only"
    )
    threshold: float = Field(default=0.5, gt=0, le=1, description="score at or above which an item is blocked "
                             "(with the firewall on: flagged; refused from `firewall.block_threshold`)")
    rules_file: str | None = Field(default=None, description="YAML rule pack; default: the shipped plugins/prompt_guard/rules/default.yaml")
    disabled_rules: list[str] = Field(default_factory=list, description="rule, heuristic or 'classifier' ids to switch off")
    detectors: DetectorToggles = Field(default_factory=DetectorToggles, description="detector families on or off")
    allow: list[AllowEntry] = Field(default_factory=list, description="sources whose items are never blocked")
    max_scan_bytes: int = Field(
        default=1 << 20, ge=4096, description="longer texts are scanned as head + tail of this many characters"
    )
    inspect_client_messages: bool = Field(default=False, description="also scan the client's own messages")
    client_roles: list[Literal["system", "user", "assistant", "tool"]] = Field(
        default_factory=lambda: ["user", "tool"], description="roles scanned when inspect_client_messages is on"
    )
    classifier_model: str | None = Field(
        default=None, description="path to a toolgate-guard-linear/1 JSON model replacing the shipped one"
    )
    neural: NeuralConfig = Field(default_factory=NeuralConfig, description="the neural detector's model and settings (P6)")
    firewall: FirewallConfig = Field(default_factory=FirewallConfig, description="the tool-call firewall (T)")
    onnx_model: OnnxModelConfig | None = Field(
        default=None, description="an optional ONNX classifier, one more piece of evidence ('classifier.onnx')"
    )
