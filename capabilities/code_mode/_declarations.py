"""The TypeScript declarations of an allowlist: one ``declare const`` per namespace, one method per
tool, rendered from each tool's encoded JSON Schemas (see ``_typescript`` for the rules).

A method reads ``name(input: {...}): Promise<...>``: its doc comment is the tool's description,
the parameters' and the result's own descriptions (``@param input``, ``@returns``) and the tags
of the errors the tool declares (``@throws``: inside the program they reject as a
``ToolFailure`` whose ``error._tag`` is the tag). ``input`` is optional when no property is
required. A tool with no success schema returns ``Promise<JSONValue>``. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from effectagent.ai import Tool

from ._errors import UnrenderableSchema
from ._plan import Namespace
from ._ts_text import comment_lines, jsdoc
from ._typescript import Document, Rendered, TypeScript, Unrenderable

__all__ = ["render_declarations"]


def render_declarations(code_mode: str, namespaces: Sequence[Namespace]) -> str:
    """The declarations of ``namespaces`` as TypeScript source, ending with a newline.

    Raises :class:`UnrenderableSchema` naming the first tool (in order) whose parameters or
    success schema has a construct that cannot be declared.
    """
    ts = TypeScript()
    consts = []
    for namespace in namespaces:
        lines = [f"declare const {namespace.name}: {{"]
        for method in namespace.methods:
            tool = method.tool
            prefix = _pascal(namespace.name) + _pascal(method.name)
            params = _root(ts, code_mode, tool, "parameters", f"{prefix}Input")
            result = _root(ts, code_mode, tool, "success", f"{prefix}Result")
            doc = comment_lines(tool.description)
            if params is not None and params.doc:
                doc.append("@param input " + " ".join(params.doc))
            if result is not None and result.doc:
                doc.append("@returns " + " ".join(result.doc))
            for failure in tool.failure:
                doc.append(f'@throws ToolFailure whose error._tag is "{failure.tag}"')
            params_text = params.text if params is not None else "Record<string, never>"
            optional = "?" if not tool.parameters_schema.get("required") else ""
            result_text = result.text if result is not None else ts.json_value()
            lines.extend(jsdoc(doc, "  "))
            signature = f"  {method.name}(input{optional}: {params_text}): Promise<{result_text}>;"
            lines.append(signature.replace("\n", "\n  "))
        lines.append("};")
        consts.append("\n".join(lines))
    return "\n\n".join([*ts.blocks(), *consts]) + "\n"


def _root(
    ts: TypeScript,
    code_mode: str,
    tool: Tool[Any, Any],
    part: Literal["parameters", "success"],
    alias: str,
) -> Rendered | None:
    schema = tool.parameters_schema if part == "parameters" else tool.success_schema
    if schema is None:
        return None
    try:
        return ts.root(Document(schema, alias))
    except Unrenderable as exc:
        raise UnrenderableSchema(code_mode, tool.name, part, exc.path, exc.reason) from None


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
