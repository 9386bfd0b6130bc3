"""Build the MCP server over one session: strict typed tools, one-line error results, resources, prompt."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from importlib.metadata import version
from typing import Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import Tool as MCPTool
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, ValidationError

from paratune.ledger import BudgetExhausted
from paratune.ledger.keyguard import mask_secrets
from paratune.oracle.benchmark import BenchmarkUnavailable
from paratune.oracle.errors import LINE, InputError, clip
from paratune.oracle.inputs.yaml_io import build

from . import prompts, resources, schemas, tools_eval, tools_info, tools_run
from .descriptions import HINTS, INSTRUCTIONS
from .exact_args import exact_arguments
from .failures import describe
from .session import Session

log = logging.getLogger(__name__)


def _strict(fn: Callable) -> Tool:
    """A tool whose unknown arguments are refused (the SDK would drop them) and whose schema says so."""
    title, read_only, destructive, idempotent, open_world = HINTS[fn.__name__]
    hints = ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                            idempotent_hint=idempotent, open_world_hint=open_world)
    # the docstring is the description (dedented: the SDK takes __doc__ as written)
    tool = Tool.from_function(fn, title=title, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints)
    loose = tool.fn_metadata.arg_model
    # type(name, bases, namespace) is typed as a plain `type`; the class it makes subclasses `loose`
    strict = cast(type[ArgModelBase], type(loose.__name__, (loose,), {
        "__module__": loose.__module__, "model_config": ConfigDict(**loose.model_config, extra="forbid")}))
    tool.fn_metadata.arg_model = strict
    tool.parameters = schemas.compact(strict.model_json_schema(by_alias=True))
    return tool


def _arguments_error(tool: Tool, arguments: dict[str, Any], exc: ValidationError) -> str:
    """The first bad argument as `key: message`, in the words the input files use."""
    try:
        build(tool.fn_metadata.arg_model, tool.fn_metadata.pre_parse_json(arguments), file=None)
    except InputError as err:
        return str(err)
    return exc.errors()[0]["msg"]


class ParatuneServer(MCPServer):
    """An MCPServer whose failed tool calls answer with one line naming the tool and the bad key (or the class
    of failure), never one of `private` (the ledger's path)."""

    def __init__(self, tools: list[Tool], *, private: list[str], **kwargs: Any):
        self._tools = {t.name: t for t in tools}
        self._published = schemas.stated_once({t.name: t.parameters for t in tools})
        self._private = sorted(set(private), key=len, reverse=True)
        super().__init__(tools=tools, **kwargs)

    async def list_tools(self) -> list[MCPTool]:
        """The tools with their input schemas as published (`schemas.stated_once`: the layout's knobs once); each
        call is still checked against its tool's whole schema."""
        return [t.model_copy(update={"input_schema": self._published[t.name]}) for t in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await self._call(name, arguments, context)
        except ToolError as exc:
            text = str(exc)
            for secret in self._private:
                text = text.replace(secret, "the ledger")
            one_line = clip(mask_secrets(text).replace("\r", "\\r").replace("\n", "\\n"), LINE)
            raise type(exc)(one_line) from exc.__cause__

    async def _call(self, name: str, arguments: dict[str, Any], context: Context | None) -> Any:
        tool = self._tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {clip(name)!r}; the tools are: {', '.join(sorted(self._tools))}")
        try:
            arguments = exact_arguments(arguments, tool.parameters)
        except InputError as exc:
            raise ToolError(f"{name}: {exc}") from None
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"{name}: {_arguments_error(tool, arguments, cause)}") from None
            if isinstance(cause, BudgetExhausted):
                raise ToolError(f"{name}: {cause}; layouts already evaluated still answer from the ledger and "
                                "evaluate_memory_only is free") from None
            if isinstance(cause, ToolError | InputError | BenchmarkUnavailable):
                raise ToolError(f"{name}: {cause}") from None
            failure = describe(cause) if cause is not None else None
            if failure is not None:
                log.warning("%s failed: %r", name, cause)
                raise ToolError(f"{name}: {failure}") from None
            if isinstance(exc, UnexpectedToolError):
                raise UnexpectedToolError(f"{name}: internal error ({type(cause).__name__}); the server is still "
                                          "running and its log has the details") from cause
            raise


def build_server(session: Session, *, log_level: str = "WARNING") -> ParatuneServer:
    """The paratune MCP server acting on `session`."""
    tools = [_strict(fn) for fn in tools_eval.tools(session) + tools_info.tools(session) + tools_run.tools(session)]
    outputs = {}  # each tool's whole output schema, served once as a resource; tools/list carries the compact one
    for tool in tools:
        if (whole := tool.fn_metadata.output_schema) is not None:
            outputs[tool.name] = whole
            tool.fn_metadata.output_schema = schemas.output_schema(whole)
    ledger = session.ledger.path
    server = ParatuneServer(tools, private=[str(ledger), str(ledger.resolve())], name="paratune",
                            version=version("paratune"), instructions=INSTRUCTIONS, log_level=log_level)
    resources.register(server, session, schemas.shared(outputs))
    prompts.register(server)
    return server
