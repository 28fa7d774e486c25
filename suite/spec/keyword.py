"""``-k`` expressions: substrings of cell ids combined with and, or, not and parentheses."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import UsageError

__all__ = ["KeywordExpression", "select"]


class KeywordExpression:
    """A ``-k`` expression: substrings of cell ids combined with and, or, not and parentheses.

    Written here rather than borrowed from pytest because pytest's matcher is a
    private module; the grammar is the same subset users know from ``pytest -k``.
    """

    _TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(1) for m in self._TOKEN.finditer(text)]
        if not self.tokens:
            raise UsageError("-k: empty expression")
        self.pos = 0
        self._tree = self._or()
        if self.pos != len(self.tokens):
            raise UsageError(f"-k {text!r}: unexpected {self.tokens[self.pos]!r}")

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str:
        tok = self._peek()
        if tok is None:
            raise UsageError(f"-k {self.text!r}: expression ends too early")
        self.pos += 1
        return tok

    def _or(self) -> Any:
        return self._chain("or", self._and)

    def _and(self) -> Any:
        return self._chain("and", self._not)

    def _chain(self, op: str, operand: Callable[[], Any]) -> Any:
        """``operand (op operand)*``, grouped from the left."""
        node = operand()
        while self._peek() == op:
            self._take()
            node = (op, node, operand())
        return node

    def _not(self) -> Any:
        if self._peek() == "not":
            self._take()
            return ("not", self._not())
        tok = self._take()
        if tok == "(":
            node = self._or()
            if self._take() != ")":
                raise UsageError(f"-k {self.text!r}: missing ')'")
            return node
        if tok in (")", "and", "or"):
            raise UsageError(f"-k {self.text!r}: unexpected {tok!r}")
        return ("word", tok)

    def matches(self, cell_id: str) -> bool:
        def ev(node: Any) -> bool:
            op = node[0]
            if op == "word":
                return bool(node[1].lower() in cell_id.lower())
            if op == "not":
                return not ev(node[1])
            if op == "and":
                return ev(node[1]) and ev(node[2])
            return ev(node[1]) or ev(node[2])

        return ev(self._tree)


def select(cells: Iterable[Cell], keyword: str | None) -> list[Cell]:
    """The cells whose ids match the ``-k`` expression (all when None)."""
    if not keyword:
        return list(cells)
    expr = KeywordExpression(keyword)
    return [c for c in cells if expr.matches(c.id)]
