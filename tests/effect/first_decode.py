"""First-time decoding by many threads at once, in a fresh process: ``python -m
tests.effect.first_decode <rounds> <threads>``. Used by ``test_json_converter_threads.py``.

Each round builds a fresh converter (so no hook is generated yet) and lets ``threads`` threads,
released together by a barrier before each class, structure the same values of the same classes — recursive ones
among them — for the first time. It prints one line of JSON: the rounds run, and every failure as
``[class name, exception type name, message]``. A failure is a decode that raised or gave a value
other than the one encoded."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import attrs

from effectagent.effect import make_json_converter


@attrs.frozen
class Point:
    x: int
    y: float


@attrs.frozen
class Tree:  # recursive through a list: its hook is resolved lazily
    label: str
    children: tuple[Tree, ...] = ()


@attrs.frozen
class Shape:  # a union of look-alike members, nested classes, a literal
    kind: Literal["path", "dot"]
    points: list[Point]
    inside: Shape | None = None


@dataclass(frozen=True)
class Edge:  # mutually recursive dataclasses
    to: Node


@dataclass(frozen=True)
class Node:
    name: str
    edges: list[Edge]


class Doc(TypedDict):  # a recursive TypedDict
    title: str
    parts: list[Doc]


VALUES: list[tuple[Any, Any]] = [
    (Point, Point(1, 2.5)),
    (Tree, Tree("a", (Tree("b"), Tree("c", (Tree("d"),))))),
    (Shape, Shape("path", [Point(0, 0.0)], Shape("dot", [Point(1, 1.0)]))),
    (Node, Node("a", [Edge(Node("b", [Edge(Node("c", []))]))])),
    (Doc, Doc(title="t", parts=[Doc(title="u", parts=[])])),
    (list[Tree], [Tree("x"), Tree("y", (Tree("z"),))]),
]


def one_round(threads: int) -> list[list[str]]:
    converter = make_json_converter()
    encoded = [(tp, value, converter.unstructure(value, tp)) for tp, value in VALUES]
    barrier = threading.Barrier(threads)
    failures: list[list[str]] = []

    def decode_all() -> None:
        for tp, value, data in encoded:
            barrier.wait()  # every thread meets each class for the first time together
            name = getattr(tp, "__name__", str(tp))
            try:
                back = converter.structure(data, tp)
            except BaseException as exc:
                failures.append([name, type(exc).__name__, str(exc)[:200]])
                continue
            if back != value:
                failures.append([name, "wrong value", ""])

    workers = [threading.Thread(target=decode_all) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures


def main(rounds: int, threads: int) -> None:
    # Switch threads as often as the interpreter can, so they interleave inside hook generation.
    sys.setswitchinterval(1e-6)
    failures: list[list[str]] = []
    for _ in range(rounds):
        failures.extend(one_round(threads))
    print(json.dumps({"rounds": rounds, "failures": failures}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
