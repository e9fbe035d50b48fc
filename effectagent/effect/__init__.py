"""The effect core: reified outcomes, tagged errors, scopes, services and layers, on Trio.

Nothing here knows about agents. See ``docs/`` and the module notes of each private module.

Besides what a program names (``Exit``/``Cause`` and their reasons, ``TaggedError``, ``attempt``,
``ServiceKey``/``Context``/``Layer``, schemas), this is what effectagent's other packages and
``sandbox`` build on — scopes, layer building and preflight, the JSON codec, the tracing hook —
which they may only import from here.
"""

from . import _attrs_init
from ._attempt import attempt as attempt
from ._attempt import is_async_callable as is_async_callable
from ._attempt import propagates as propagates
from ._cause import Cause as Cause
from ._cause import Die as Die
from ._cause import Exit as Exit
from ._cause import Fail as Fail
from ._cause import Failure as Failure
from ._cause import Interrupt as Interrupt
from ._cause import Success as Success
from ._context import Context as Context
from ._context import ServiceKey as ServiceKey
from ._errors import TaggedError as TaggedError
from ._layer import Layer as Layer
from ._layer import MissingRequirement as MissingRequirement
from ._layer import MissingServicesError as MissingServicesError
from ._layer import build_layer as build_layer
from ._layer import merge as merge
from ._layer import preflight as preflight
from ._schema import JSONValue as JSONValue
from ._schema import SchemaDerivationError as SchemaDerivationError
from ._schema import SchemaError as SchemaError
from ._schema import SchemaIssue as SchemaIssue
from ._schema import SchemaLimits as SchemaLimits
from ._schema import checked_encoder as checked_encoder
from ._schema import decode as decode
from ._schema import decode_json as decode_json
from ._schema import encode as encode
from ._schema import encode_as as encode_as
from ._schema import field_meta as field_meta
from ._schema import json_schema as json_schema
from ._schema import make_json_converter as make_json_converter
from ._schema import parse_json_text as parse_json_text
from ._scope import Fiber as Fiber
from ._scope import Scope as Scope
from ._scope import ScopeClosedError as ScopeClosedError
from ._scope import open_scope as open_scope
from ._semaphore import Semaphore as Semaphore
from ._trace import AttributeValue as AttributeValue
from ._trace import SpanHandle as SpanHandle
from ._trace import SpanKind as SpanKind
from ._trace import trace_span as trace_span
from ._trace import use_span_starter as use_span_starter

#: Internal — not for programs, and not in ``__all__``: the cheaper ``__init__`` that
#: effectagent's own ai, core and engine put on their hot attrs classes (see ``_attrs_init``).
#: It is named here only because a package may import nothing of another but what its ``__init__``
#: names (``tests/import_contracts.py``); the export tests pin it as the one such name.
_fast_init = _attrs_init.fast_init

__all__ = [
    "AttributeValue",
    "Cause",
    "Context",
    "Die",
    "Exit",
    "Fail",
    "Failure",
    "Fiber",
    "Interrupt",
    "JSONValue",
    "Layer",
    "MissingRequirement",
    "MissingServicesError",
    "merge",
    "SchemaDerivationError",
    "SchemaError",
    "SchemaIssue",
    "SchemaLimits",
    "Scope",
    "ScopeClosedError",
    "Semaphore",
    "ServiceKey",
    "SpanHandle",
    "SpanKind",
    "Success",
    "TaggedError",
    "attempt",
    "is_async_callable",
    "propagates",
    "build_layer",
    "checked_encoder",
    "decode",
    "decode_json",
    "encode",
    "encode_as",
    "field_meta",
    "json_schema",
    "make_json_converter",
    "parse_json_text",
    "open_scope",
    "preflight",
    "trace_span",
    "use_span_starter",
]
