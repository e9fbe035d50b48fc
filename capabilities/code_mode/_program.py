"""The source a pass runs: the model's program inside a fixed wrapper, and how its report is read.

Design notes
------------
The executor's harness calls one async function with a flat ``tools`` object (one async function
per allowed host call). The model writes against namespaces instead — ``weather.forecast({...})``
— so the source handed to the executor is the model's program wrapped::

    ((load) => { ...fixed code...; return async (tools) => { ... } })(
      (weather, files) => (
    <the model's program>
    ))

``load`` is the only function whose scope holds the model's text, and its parameters are the
only names it adds: the namespaces, frozen prototype-less objects whose methods call the host
(``input`` defaults to ``{}``). Nothing of the wrapper's own state is in scope for the program.

The wrapper reports one JSON array, so the host can tell every ending apart without trusting
the program to say which it was:

* ``[0, value]`` — the program's value;
* ``[1, name, message]`` — it threw; ``[1, name, null, size]`` when the message's JSON is over
  the egress budget (withheld whole rather than cut: a cut could keep part of a secret);
* ``[2, reason]`` — the program is not one async function expression without parameters.

None of this is a security boundary — the executor is. A program that escapes the wrapper (it
can close its parentheses early) only garbles its own report, which the host then refuses as an
invalid program.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

import attrs

from ._plan import Namespace

__all__ = ["Report", "read_report", "strip_fence", "wrap"]

#: Longest thrown ``name`` passed on; a longer one is reported as "Error".
NAME_CHARS: Final = 128

_TEMPLATE: Final = """((load) => {
  "use strict";
  const freeze = Object.freeze;
  const define = Object.defineProperty;
  const create = Object.create;
  const prototypeOf = Object.getPrototypeOf;
  const apply = Reflect.apply;
  const stringify = JSON.stringify;
  const text = String;
  const encoder = new TextEncoder();
  const encode = TextEncoder.prototype.encode;
  const byteLength = (value) => apply(encode, encoder, [value]).byteLength;
  const AsyncFunction = prototypeOf(async function () {});
  const NAMESPACES = %(namespaces)s;
  const BUDGET = %(budget)d;
  const bind = (tools, methods) => {
    const namespace = create(null);
    for (let i = 0; i < methods.length; i++) {
      const call = tools[methods[i][1]];
      const method = (input) => call(input === undefined ? {} : input);
      define(namespace, methods[i][0], { value: freeze(method), enumerable: true });
    }
    return freeze(namespace);
  };
  const describe = (thrown) => {
    let name = "Error";
    let message = "";
    try {
      if (thrown !== null && (typeof thrown === "object" || typeof thrown === "function")) {
        if (typeof thrown.name === "string") name = thrown.name;
        if (thrown.message !== undefined) message = text(thrown.message);
      } else {
        name = "Thrown " + typeof thrown;
        message = text(thrown);
      }
    } catch {
      message = "[a thrown value whose properties could not be read]";
    }
    if (name.length > %(name_chars)d) name = "Error";
    const size = byteLength(stringify(message));
    return size > BUDGET ? [1, name, null, size] : [1, name, message];
  };
  return async (tools) => {
    const namespaces = [];
    for (let i = 0; i < NAMESPACES.length; i++) namespaces.push(bind(tools, NAMESPACES[i]));
    let program;
    try {
      program = apply(load, undefined, namespaces);
    } catch (error) {
      const [, name, message] = describe(error);
      return [2, name + ": " + (message === null ? "(withheld: too large)" : message)];
    }
    if (typeof program !== "function" || prototypeOf(program) !== AsyncFunction) {
      return [2, "the program must be one async function expression, such as `async () => { ... }`"];
    }
    if (program.length !== 0) {
      return [2, "the program takes no parameters: the namespaces are in scope as they are"];
    }
    try {
      return [0, await program()];
    } catch (thrown) {
      return describe(thrown);
    }
  };
})((%(parameters)s) => (
"""

_CLOSE: Final = "\n))\n"


def wrap(namespaces: Sequence[Namespace], program: str, budget: int) -> str:
    """The executor's source for ``program`` over ``namespaces`` (see the module notes)."""
    table = [[[m.name, m.tool.name] for m in namespace.methods] for namespace in namespaces]
    head = _TEMPLATE % {
        "namespaces": json.dumps(table, separators=(",", ":")),
        "budget": budget,
        "name_chars": NAME_CHARS,
        "parameters": ", ".join(namespace.name for namespace in namespaces),
    }
    return head + program + _CLOSE


def wrapper_bytes(namespaces: Sequence[Namespace], budget: int) -> int:
    """How many bytes :func:`wrap` adds to a program."""
    return len(wrap(namespaces, "", budget).encode("utf-8"))


def strip_fence(source: str) -> str:
    """``source`` without surrounding whitespace or one enclosing Markdown code fence (models
    often send ```` ```js ... ``` ````); anything else is left exactly as written."""
    text = source.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_line_end = text.find("\n")
        if first_line_end != -1:
            info = text[3:first_line_end].strip()
            if info in ("", "js", "javascript", "ts", "typescript", "JavaScript", "TypeScript"):
                return text[first_line_end + 1 : -3].strip()
    return text


@attrs.frozen
class Report:
    """What the wrapper reported: ``ending`` is ``"value"``, ``"threw"`` or ``"invalid"``.

    ``value`` is the program's value; ``name`` and ``message`` its thrown error (``message``
    None when withheld, ``size`` then its JSON size); ``message`` is the reason when invalid.
    """

    ending: str
    value: object = None
    name: str = ""
    message: str | None = None
    size: int = 0


def read_report(raw: object) -> Report | None:
    """The wrapper's report in ``raw`` (the pass's value), or None if it is not one (the program
    escaped the wrapper)."""
    if not isinstance(raw, list) or not raw or type(raw[0]) is not int:
        return None
    match raw:
        case [0, value]:
            return Report("value", value=value)
        case [1, str(name), str(message)]:
            return Report("threw", name=name, message=message)
        case [1, str(name), None, int(size)]:
            return Report("threw", name=name, size=size)
        case [2, str(reason)]:
            return Report("invalid", message=reason)
    return None
