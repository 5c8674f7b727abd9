"""One suite's tools as an MCP server (the SDK's low-level `Server`, Streamable HTTP at `/mcp`).

Each tool is listed with its AgentDojo name, description and parameters (as JSON schema) and the
annotations of `annotations.ANNOTATIONS`. A call runs the tool with AgentDojo's own
`FunctionsRuntime` on the environment the bench set for the current case, and answers with the
text AgentDojo's `ToolsExecutor` gives a model (`tool_result_to_str`); a tool error (AgentDojo's
`'ErrorType: message'`) becomes an MCP error result. Every call that reaches the server is
recorded: that trace, not the model's intentions, is what AgentDojo's trace-based checks read
(a call the gateway held never ran).
"""

from __future__ import annotations

import threading
from ast import literal_eval
from typing import Any

import mcp_types as types
from agentdojo.agent_pipeline.tool_execution import is_string_list, tool_result_to_str
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime
from mcp.server import Server

from bench.agentdojo.annotations import ANNOTATIONS
from tests.support.http_server import ServerThread
from bench.agentdojo.suites import suites


class SuiteBackend:
    """The suite's runtime and the mutable case state: the environment and the calls that ran."""

    def __init__(self, suite_name: str) -> None:
        self.suite_name = suite_name
        self.suite = suites()[suite_name]
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.lock = threading.Lock()
        self.environment: Any = None
        self.trace: list[FunctionCall] = []

    def begin(self, environment: Any) -> None:
        """A new case: tools act on `environment` (mutated in place) and the trace starts empty."""
        with self.lock:
            self.environment = environment
            self.trace = []

    def run(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(text, is_error) of one call, as AgentDojo's `ToolsExecutor` runs it."""
        args = dict(arguments)
        for key, value in args.items():  # what ToolsExecutor does to a list sent as its repr
            if isinstance(value, str) and is_string_list(value):
                args[key] = literal_eval(value)
        with self.lock:
            if self.environment is None:
                return "no case is running", True
            self.trace.append(FunctionCall(function=name, args=args))
            result, error = self.runtime.run_function(self.environment, name, args)
        if error is not None:
            return error, True
        return tool_result_to_str(result), False

    def tools(self) -> list[types.Tool]:
        """The suite's tools with their annotations."""
        table = ANNOTATIONS[self.suite_name]
        out = []
        for function in self.suite.tools:
            ann = table[function.name]
            out.append(types.Tool(
                name=function.name,
                description=function.description,
                input_schema=function.parameters.model_json_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=ann.read_only, destructive_hint=ann.destructive, open_world_hint=ann.open_world
                ),
            ))
        return out


def build_server(backend: SuiteBackend) -> Server[Any]:
    """A low-level SDK server over `backend` (tools only)."""
    listed = types.ListToolsResult(tools=backend.tools())

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, is_error = backend.run(params.name, dict(params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)

    return Server(f"agentdojo-{backend.suite_name}", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


class SuiteServer:
    """A suite's MCP server on a loopback port, in a thread of the bench process."""

    def __init__(self, suite_name: str) -> None:
        self.backend = SuiteBackend(suite_name)
        app = build_server(self.backend).streamable_http_app(json_response=True)
        self.thread = ServerThread(app)

    @property
    def url(self) -> str:
        return f"{self.thread.url}/mcp"

    def start(self) -> "SuiteServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()
