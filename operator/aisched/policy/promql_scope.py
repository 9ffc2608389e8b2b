"""A tenant's PromQL, confined to the series of its own namespace.

An InferenceService's PromQL metric is written by whoever may edit that service, and its
answer comes back to them in `status.currentMetricValue`. Prometheus has no notion of
tenants, so the query is rewritten before it is sent, the way prom-label-proxy does it:
series are read by selectors and only by selectors, so every selector of the query gets
``namespace="<the service's namespace>"`` ANDed to its own matchers. Whatever the tenant's
matchers say (``namespace=~".*"``, ``namespace!="x"``, ``{__name__=~".+"}``), the equality
narrows them to its namespace; functions that make up labels (``label_replace``) change
what an answer is called, never which series it is computed from.

The query is parsed by ``promql-parser`` (the Rust parser GreptimeDB uses) and written out
again here, not by that library: its printer copies label values between quotes without
escaping them (``a="x\\"} or secret{b=\\""`` would come out as two selectors) and loses
sub-second offsets. The text written is parsed again and every selector checked before it
is handed on, so a printer mistake refuses a query rather than widening it.

Refused (`QueryRefusedError`): what does not parse; selectors with ``or`` matcher groups (an
extension Prometheus lacks); ``info()``, which reads ``target_info`` series beyond its
arguments; nesting deeper than `MAX_DEPTH`; ``@`` a fixed time, and reaching back more
than `MAX_LOOKBACK` (ranges and offsets added up), which would read what the namespace held
before: a namespace deleted and made again may be another team's.

The cost of the whole expression is bounded too, not each part of it alone. One instant query
evaluates its top expression once; a subquery evaluates its inner expression once per step,
and a subquery inside it once per step of each of those: the evaluations multiply through the
nesting. Refused: more than `MAX_EVALUATIONS` evaluations of subqueries' expressions in all
(two ``[1h:1s]`` nested are 3600 x 3600 = 12,960,000, where Prometheus caps a whole range query
at 11,000 points; four side by side, 14,400), and ranges that read more than `MAX_RANGE_READ` of
samples per series in all, each range times the evaluations of the subqueries around it
(``rate(x[5m])[1h:1s]`` reads 3600 five-minute windows).

Series: every function and operator but one labels its answer with labels of the series it
was given (``label_replace`` and ``label_join`` copy and rewrite them; ``vector()``,
``time()`` and literals have none), so one evaluation answers at most as many series as its
selectors read from the namespace, and a subquery, which keeps every label set it meets over
its steps, no more than that either. ``count_values`` is the exception (`VALUE_LABELLING`):
it makes a label of each distinct sample value, so inside a subquery it makes new series at
every step (``count_values("v", timestamp(vector(1)))[1h:1s]`` is 3600 series from none read),
multiplied by every subquery around it. It is refused inside a subquery; at the top, one
evaluation, it answers at most as many series as it was given.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import timedelta

import promql_parser as pp

MAX_DEPTH = 64
"""Nesting of expressions; the printer recurses, and no autoscaling metric needs more."""
MAX_LOOKBACK = timedelta(days=1)
"""How far back a query may read, its ranges and offsets added up along each path."""
MAX_EVALUATIONS = 11_000
"""Prometheus's own cap on the points of a range query, applied to all the evaluations of a query's subqueries."""
MAX_RANGE_READ = timedelta(days=7)
"""Of samples per series a query's ranges read in all, over every evaluation of the subqueries around them."""
DEFAULT_SUBQUERY_STEP = timedelta(minutes=1)
"""Prometheus's default evaluation interval, the step of a subquery that names none."""
IMPLICIT_READS = frozenset({"info"})
"""Functions that read series other than those their arguments select."""
VALUE_LABELLING = frozenset({"count_values"})
"""Aggregations whose answer is labelled with sample values, not with labels of the series they were given."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATORS = frozenset({"+", "-", "*", "/", "%", "^", "atan2", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"})
_SET_OPERATORS = frozenset({"and", "or", "unless"})
_AGGREGATIONS = frozenset(
    {
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "count_values",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
_MATCH_OPS = (
    (pp.MatchOp.Equal, "="),
    (pp.MatchOp.NotEqual, "!="),
    (pp.MatchOp.Re, "=~"),
    (pp.MatchOp.NotRe, "!~"),
)
"""Pairs, not a dict: the binding's enum members are not hashable."""


class QueryRefusedError(ValueError):
    """The query cannot be confined to one namespace; the message says why, for the tenant."""


@dataclass(frozen=True)
class TenantScope:
    """The namespace a query may read, and the label that says which namespace a series belongs to."""

    namespace: str
    label: str = "namespace"


def scope_query(query: str, scope: TenantScope) -> str:
    """The query rewritten so that every selector reads only `scope.namespace`; raises QueryRefusedError."""
    if not _LABEL_NAME.fullmatch(scope.label):
        raise ValueError(f"namespace label {scope.label!r} is not a label name")
    try:
        tree = pp.parse(query)
    except (ValueError, OverflowError) as error:
        raise QueryRefusedError(f"metric.query is not valid PromQL: {_first_line(str(error))}") from None
    scoped = _Printer(scope).expr(tree, _Where())
    check_scoped(scoped, scope)
    return scoped


def check_scoped(query: str, scope: TenantScope) -> None:
    """Raise QueryRefusedError unless every selector of `query` carries the scope's equality matcher."""
    try:
        tree = pp.parse(query)
    except (ValueError, OverflowError) as error:  # the printer wrote something it cannot read back
        raise QueryRefusedError(f"the scoped query does not parse: {_first_line(str(error))}") from None
    unscoped: list[str] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector) and not scoped_selector(node, scope):
            unscoped.append(str(node.name))

    pp.walk(tree, visit)
    if unscoped:
        raise QueryRefusedError("the query could not be confined to its namespace")


def scoped_selector(selector: pp.VectorSelector, scope: TenantScope) -> bool:
    """Whether a selector can match only series of the scope's namespace."""
    matchers = selector.matchers
    if matchers.or_matchers:
        return False
    return any(
        m.name == scope.label and m.op == pp.MatchOp.Equal and m.value == scope.namespace for m in matchers.matchers
    )


def quote(value: str) -> str:
    """A PromQL double-quoted string for any text: printable characters as they are, the rest as Go escapes."""
    out = []
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char.isprintable():
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class _Where:
    """Where the printer is in the tree: how deep, how far back in time the enclosing ranges reach, and
    the steps of the subqueries around it (their product: how often this part is evaluated)."""

    depth: int = 0
    back: timedelta = timedelta(0)
    steps: tuple[int, ...] = ()

    @property
    def evaluations(self) -> int:
        return math.prod(self.steps)

    def deeper(self) -> _Where:
        if self.depth >= MAX_DEPTH:
            raise QueryRefusedError(f"the query nests deeper than {MAX_DEPTH} levels")
        return replace(self, depth=self.depth + 1)

    def reaching(self, offset: timedelta | None, span: timedelta) -> _Where:
        back = self.back + abs(offset or timedelta(0)) + span
        if back > MAX_LOOKBACK:
            limit, asked = pp.display_duration(MAX_LOOKBACK), pp.display_duration(back)
            raise QueryRefusedError(f"a query may reach back {limit} (ranges and offsets added up); this one, {asked}")
        return replace(self, back=back)

    def stepping(self, steps: int) -> _Where:
        """Inside a subquery of STEPS steps: each evaluation of it evaluates its inner expression STEPS times."""
        nested = (*self.steps, steps)
        if math.prod(nested) > MAX_EVALUATIONS:
            product = " x ".join(str(n) for n in nested)
            total = f" = {math.prod(nested)}" if len(nested) > 1 else ""
            raise QueryRefusedError(
                f"subqueries may evaluate their expression at most {MAX_EVALUATIONS} times, nested ones "
                f"multiplied; this one, {product}{total}"
            )
        return replace(self, steps=nested)


@dataclass
class _Cost:
    """What the expression printed so far costs Prometheus, in all: evaluations of subqueries' expressions,
    and the time of samples its ranges read per series."""

    evaluations: int = 0
    read: timedelta = timedelta(0)

    def evaluate(self, times: int) -> None:
        self.evaluations += times
        if self.evaluations > MAX_EVALUATIONS:
            raise QueryRefusedError(
                f"subqueries may evaluate their expressions at most {MAX_EVALUATIONS} times in all, nested ones "
                f"multiplied; this query's, {self.evaluations} at least"
            )

    def reading(self, span: timedelta, times: int) -> None:
        self.read += span * times
        if self.read > MAX_RANGE_READ:
            limit = pp.display_duration(MAX_RANGE_READ)
            raise QueryRefusedError(
                f"a query may read {limit} of samples per series in all (each range times the steps of the "
                f"subqueries around it); this one, {pp.display_duration(self.read)} at least"
            )


class _Printer:
    """PromQL text for a parsed tree, with every selector scoped; children are parenthesised, never guessed."""

    def __init__(self, scope: TenantScope) -> None:
        self.scope = scope
        self.cost = _Cost()

    def expr(self, node: pp.Expr, where: _Where) -> str:
        if isinstance(node, pp.VectorSelector):
            where.reaching(node.offset, timedelta(0))
            return self.matchers(node) + _modifiers(node.at, node.offset)
        if isinstance(node, pp.MatrixSelector):
            vector = node.vector_selector
            where.reaching(vector.offset, node.range)
            self.cost.reading(node.range, where.evaluations)
            return self.matchers(vector) + f"[{_duration(node.range)}]" + _modifiers(vector.at, vector.offset)
        if isinstance(node, pp.NumberLiteral):
            return _number(node.val)
        if isinstance(node, pp.StringLiteral):
            return quote(node.val)
        return self.compound(node, where.deeper())

    def compound(self, node: pp.Expr, where: _Where) -> str:
        if isinstance(node, pp.ParenExpr):
            return f"({self.expr(node.expr, where)})"
        if isinstance(node, pp.UnaryExpr):
            return f"-{self.operand(node.expr, where)}"
        if isinstance(node, pp.BinaryExpr):
            return self.binary(node, where)
        if isinstance(node, pp.AggregateExpr):
            return self.aggregate(node, where)
        if isinstance(node, pp.Call):
            return self.call(node, where)
        if isinstance(node, pp.SubqueryExpr):
            return self.subquery(node, where)
        raise QueryRefusedError(f"metric.query holds a {type(node).__name__}, which cannot be confined to a namespace")

    def call(self, node: pp.Call, where: _Where) -> str:
        name = node.func.name
        if name in IMPLICIT_READS:
            raise QueryRefusedError(f"{name}() reads series beyond its arguments and is not allowed in metric.query")
        if not _LABEL_NAME.fullmatch(name):
            raise QueryRefusedError(f"unknown function {name[:64]!r}")
        return f"{name}({', '.join(self.expr(arg, where) for arg in node.args)})"

    def operand(self, node: pp.Expr, where: _Where) -> str:
        """An operand in parentheses (its own, if it has them), so precedence is the tree's, not the text's."""
        if isinstance(node, pp.MatrixSelector):
            raise QueryRefusedError("a range vector cannot be an operand")
        text = self.expr(node, where)
        return text if isinstance(node, pp.ParenExpr) else f"({text})"

    def matchers(self, node: pp.VectorSelector) -> str:
        if node.matchers.or_matchers:
            raise QueryRefusedError("'or' between label matchers is not PromQL Prometheus reads")
        parts = [] if node.name is None else [f"__name__={quote(node.name)}"]
        for matcher in node.matchers.matchers:
            if not _LABEL_NAME.fullmatch(matcher.name):
                raise QueryRefusedError(f"label name {matcher.name[:64]!r} is not allowed")
            parts.append(f"{matcher.name}{_match_op(matcher.op)}{quote(matcher.value)}")
        # ANDed: the tenant's own matchers keep narrowing, none of them can widen past this one.
        enforced = f"{self.scope.label}={quote(self.scope.namespace)}"
        if enforced not in parts:
            parts.append(enforced)
        return "{" + ", ".join(parts) + "}"

    def binary(self, node: pp.BinaryExpr, where: _Where) -> str:
        op = str(node.op)
        if op not in _OPERATORS:
            raise QueryRefusedError(f"operator {op[:16]!r} is not allowed")
        words = [op]
        modifier = node.modifier
        if modifier is not None:
            fill = modifier.fill_values
            if fill.lhs is not None or fill.rhs is not None:
                raise QueryRefusedError("fill modifiers of binary operators are not allowed")
            if modifier.return_bool:
                words.append("bool")
            if modifier.matching is not None:
                keyword = "on" if modifier.matching.type == pp.LabelModifierType.Include else "ignoring"
                words.append(f"{keyword} {_labels(modifier.matching.labels)}")
            if op not in _SET_OPERATORS and modifier.card == pp.VectorMatchCardinality.ManyToOne:
                words.append(f"group_left {_labels(modifier.group_labels or [])}")
            elif op not in _SET_OPERATORS and modifier.card == pp.VectorMatchCardinality.OneToMany:
                words.append(f"group_right {_labels(modifier.group_labels or [])}")
        return f"{self.operand(node.lhs, where)} {' '.join(words)} {self.operand(node.rhs, where)}"

    def aggregate(self, node: pp.AggregateExpr, where: _Where) -> str:
        op = str(node.op)
        if op not in _AGGREGATIONS:
            raise QueryRefusedError(f"aggregation {op[:16]!r} is not allowed")
        if op in VALUE_LABELLING and where.steps:
            raise QueryRefusedError(
                f"{op}() inside a subquery makes a series of every value at every step; "
                "it is allowed only outside subqueries"
            )
        grouping = ""
        if node.modifier is not None:
            keyword = "by" if node.modifier.type == pp.AggModifierType.By else "without"
            grouping = f" {keyword} {_labels(node.modifier.labels)}"
        args = [self.expr(node.expr, where)]
        if node.param is not None:
            args.insert(0, self.expr(node.param, where))
        return f"{op}{grouping} ({', '.join(args)})"

    def subquery(self, node: pp.SubqueryExpr, where: _Where) -> str:
        span = node.range
        if span is None:
            raise QueryRefusedError("a subquery needs a range")
        interval = node.step or DEFAULT_SUBQUERY_STEP
        if interval <= timedelta(0):
            raise QueryRefusedError("a subquery's step must be positive")
        inner = where.reaching(node.offset, span).stepping(max(1, math.ceil(span / interval)))
        self.cost.evaluate(inner.evaluations)
        step = node.step
        window = f"[{_duration(span)}:{_duration(step) if step else ''}]"
        return f"{self.operand(node.expr, inner)}{window}" + _modifiers(node.at, node.offset)


def _duration(span: timedelta) -> str:
    """Whole milliseconds, Prometheus's resolution; sub-millisecond parts are not PromQL."""
    milliseconds, rest = divmod(span, timedelta(milliseconds=1))
    if rest:
        raise QueryRefusedError("durations are whole milliseconds")
    return f"{milliseconds}ms"


def _modifiers(at: pp.AtModifier | None, offset: timedelta | None) -> str:
    text = ""
    if at is not None:
        if at.type == pp.AtModifierType.Start:
            text += " @ start()"
        elif at.type == pp.AtModifierType.End:
            text += " @ end()"
        else:  # a fixed time: whatever the namespace's name held then, maybe another team's
            raise QueryRefusedError("@ a fixed time is not allowed in metric.query; @ start() and @ end() are")
    if offset:
        sign = "-" if offset < timedelta(0) else ""
        text += f" offset {sign}{_duration(abs(offset))}"
    return text


def _match_op(op: pp.MatchOp) -> str:
    for member, text in _MATCH_OPS:
        if op == member:
            return text
    raise QueryRefusedError(f"unknown label matcher {op}")


def _labels(names: list[str]) -> str:
    for name in names:
        if not _LABEL_NAME.fullmatch(name):
            raise QueryRefusedError(f"label name {name[:64]!r} is not allowed")
    return "(" + ", ".join(names) + ")"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)


def _first_line(text: str) -> str:
    """Parser errors quote the query back; the tenant wrote it, but keep the message one bounded line."""
    return text.splitlines()[0][:200] if text else "no reason given"
