"""The effect core: reified outcomes, tagged errors, scopes, services and layers, on Trio.

Nothing here knows about agents. See ``docs/`` and the module notes of each private module.
"""

from ._attempt import attempt as attempt
from ._attempt import attempt_sync as attempt_sync
from ._cause import Cause as Cause
from ._cause import Die as Die
from ._cause import Exit as Exit
from ._cause import Fail as Fail
from ._cause import Failure as Failure
from ._cause import Interrupt as Interrupt
from ._cause import Interrupted as Interrupted
from ._cause import Reason as Reason
from ._cause import ResultFailure as ResultFailure
from ._cause import Success as Success
from ._cause import exit_from_result as exit_from_result
from ._cause import exit_to_result as exit_to_result
from ._context import Context as Context
from ._context import MissingServiceError as MissingServiceError
from ._context import ServiceKey as ServiceKey
from ._errors import TaggedError as TaggedError
from ._fast_init import fast_init as fast_init
from ._layer import Layer as Layer
from ._layer import MissingRequirement as MissingRequirement
from ._layer import MissingServicesError as MissingServicesError
from ._layer import build_layer as build_layer
from ._layer import find_missing as find_missing
from ._layer import merge as merge
from ._layer import open_layer as open_layer
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
from ._schema import encode_json as encode_json
from ._schema import field_meta as field_meta
from ._schema import json_schema as json_schema
from ._schema import make_json_converter as make_json_converter
from ._schema import parse_json_text as parse_json_text
from ._scope import Fiber as Fiber
from ._scope import Finalizer as Finalizer
from ._scope import Scope as Scope
from ._scope import ScopeClosedError as ScopeClosedError
from ._scope import open_scope as open_scope
from ._semaphore import PermitLedger as PermitLedger
from ._semaphore import Semaphore as Semaphore
from ._trace import AttributeValue as AttributeValue
from ._trace import SpanHandle as SpanHandle
from ._trace import SpanKind as SpanKind
from ._trace import SpanStarter as SpanStarter
from ._trace import trace_span as trace_span
from ._trace import tracing_active as tracing_active
from ._trace import use_span_starter as use_span_starter

__all__ = [
    "AttributeValue",
    "Cause",
    "Context",
    "Die",
    "Exit",
    "Fail",
    "Failure",
    "Fiber",
    "Finalizer",
    "Interrupt",
    "Interrupted",
    "JSONValue",
    "Layer",
    "MissingRequirement",
    "MissingServiceError",
    "MissingServicesError",
    "PermitLedger",
    "Reason",
    "ResultFailure",
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
    "SpanStarter",
    "Success",
    "TaggedError",
    "fast_init",
    "attempt",
    "attempt_sync",
    "build_layer",
    "checked_encoder",
    "decode",
    "decode_json",
    "encode",
    "encode_as",
    "encode_json",
    "field_meta",
    "exit_from_result",
    "exit_to_result",
    "find_missing",
    "json_schema",
    "make_json_converter",
    "parse_json_text",
    "merge",
    "open_layer",
    "open_scope",
    "preflight",
    "trace_span",
    "tracing_active",
    "use_span_starter",
]
