"""A tenant's PromQL reads only its namespace: every selector of what is sent carries the equality matcher."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import timedelta

import promql_parser as pp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.promql_scope import (
    MAX_EVALUATIONS,
    MAX_RANGE_READ,
    VALUE_LABELLING,
    QueryRefusedError,
    TenantScope,
    quote,
    scope_query,
)

SCOPE = TenantScope("team-a")


def selectors(query: str) -> list[pp.VectorSelector]:
    found: list[pp.VectorSelector] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            found.append(node)

    pp.walk(pp.parse(query), visit)
    return found


def assert_confined(query: str, scope: TenantScope = SCOPE) -> None:
    """Every selector: no 'or' groups and an equality matcher on the scope's namespace (ANDed with the rest)."""
    for selector in selectors(query):
        assert not selector.matchers.or_matchers
        enforced = [
            m
            for m in selector.matchers.matchers
            if m.name == scope.label and m.op == pp.MatchOp.Equal and m.value == scope.namespace
        ]
        assert enforced, f"{selector} in {query}"


# -- generated queries ---------------------------------------------------------------------


def string_literal(value: str) -> str:
    # JSON's escapes are a subset of PromQL's (Go's); a different printer from the one under test.
    return json.dumps(value, ensure_ascii=False)


names = st.sampled_from(["up", "secret", "http_requests_total", "job:rate5m", "sum", "on", "namespace"])
label_names = st.sampled_from(["namespace", "job", "pod", "__name__", "le", "exported_namespace"])
values = st.one_of(
    st.sampled_from(["team-a", "team-b", "", ".*", ".+", "team-.*", 'x"} or secret{b="', "\\", "\n"]),
    st.text(max_size=12),
)
matchers = st.builds(
    lambda name, op, value: f"{name}{op}{string_literal(value)}",
    label_names,
    st.sampled_from(["=", "!=", "=~", "!~"]),
    values,
)
durations = st.sampled_from(["1ms", "30s", "1m", "5m", "1h30m", "1d", "2d"])
modifiers = st.builds(
    lambda at, offset: at + offset,
    st.sampled_from(["", "", " @ start()", " @ end()", " @ 1609746000.5"]),
    st.sampled_from(["", "", " offset 5m", " offset -1m", " offset 1ms"]),
)


@st.composite
def vector_selectors(draw: st.DrawFn) -> str:
    name = draw(st.one_of(names, names, names, st.none()))
    group = draw(st.lists(matchers, max_size=4))
    body = "{" + ", ".join(group) + "}" if group or name is None else ""
    if draw(st.booleans()) and group:
        body = "{" + " or ".join(group) + "}"  # 'or' matcher groups: an extension Prometheus lacks
    return (name or "") + body


@st.composite
def range_selectors(draw: st.DrawFn) -> str:
    return f"{draw(vector_selectors())}[{draw(durations)}]{draw(modifiers)}"


def expressions(depth: int = 3) -> st.SearchStrategy[str]:
    leaves = st.one_of(
        st.builds(lambda s, m: s + m, vector_selectors(), modifiers),
        st.sampled_from(["1", "-2.5", "NaN", "Inf", "0x1f", "time()"]),
    )
    if depth == 0:
        return leaves
    inner = expressions(depth - 1)
    return st.one_of(
        leaves,
        st.builds(
            lambda f, r: f"{f}({r})",
            st.sampled_from(["rate", "increase", "max_over_time", "absent_over_time"]),
            range_selectors(),
        ),
        st.builds(
            lambda f, e, d, step, m: f"{f}(({e})[{d}:{step}]{m})",
            st.sampled_from(["max_over_time", "avg_over_time"]),
            inner,
            durations,
            st.sampled_from(["", "1m", "1ms", "1s", "10s"]),
            modifiers,
        ),
        st.builds(
            lambda op, grouping, e: f"{op}{grouping}({e})",
            st.sampled_from(["sum", "avg", "max", "count", "group"]),
            st.sampled_from(["", " by (namespace)", " without (pod)", " by ()"]),
            inner,
        ),
        st.builds(lambda k, e: f"topk({k}, {e})", st.sampled_from(["1", "scalar(secret)"]), inner),
        st.builds(lambda label, e: f"count_values({string_literal(label)}, {e})", values, inner),
        st.builds(
            lambda a, op, mod, b: f"({a}) {op}{mod} ({b})",
            inner,
            st.sampled_from(["+", "-", "*", "/", "%", "^", "atan2", "==", ">", "<=", "and", "or", "unless"]),
            st.sampled_from(["", " bool", " on (namespace)", " ignoring (pod)", " on (job) group_left (pod)"]),
            inner,
        ),
        st.builds(lambda e: f"-{e}", inner),
        st.builds(lambda e, value: f'label_replace({e}, "namespace", {string_literal(value)}, "", "")', inner, values),
        st.builds(lambda e: f"info({e})", inner),
    )


@settings(max_examples=400, deadline=None)
@given(expressions())
def test_every_selector_of_a_scoped_query_reads_only_the_tenants_namespace(query: str) -> None:
    try:
        scoped = scope_query(query, SCOPE)
    except QueryRefusedError:
        return
    assert_confined(scoped)
    # The printer writes back what it read: scoping what it wrote changes nothing.
    assert scope_query(scoped, SCOPE) == scoped


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_label_value_survives_the_printer(value: str) -> None:
    scoped = scope_query(f"secret{{job={string_literal(value)}}}", SCOPE)
    (selector,) = selectors(scoped)
    pairs = [(m.name, m.value) for m in selector.matchers.matchers]
    assert pairs == [("__name__", "secret"), ("job", value), ("namespace", "team-a")]
    assert pp.parse(quote(value)).val == value  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_text_is_scoped_or_refused(query: str) -> None:
    with contextlib.suppress(QueryRefusedError):
        assert_confined(scope_query(query, SCOPE))


# -- known attacks -------------------------------------------------------------------------

CONFINED = [
    'sum(secret_metric{namespace="team-b"})',
    '{__name__=~".+"}',
    'secret{namespace=~".*"}',
    'secret{namespace!="team-a"}',
    'secret{namespace!~"team-a"}',
    'secret{exported_namespace="team-b"}',
    'label_replace(secret{namespace="team-b"}, "namespace", "team-a", "", "")',
    'up or secret{namespace="team-b"}',
    'up unless on() secret{namespace="team-b"}',
    'max_over_time(secret{namespace="team-b"}[5m:1m])',
    "secret @ end()",
    "secret offset -1h",
    'topk(scalar(secret{namespace="team-b"}), up)',
    'absent(secret{namespace="team-b"})',
    "sum by (namespace) (secret)",
    r'up{job="\"} or secret{namespace=\"team-b\""}',
    "vector(1)",
    # Within the cost bounds: nested subqueries whose evaluations multiply to little, a value count at the top.
    'max_over_time(max_over_time(secret{namespace="team-b"}[10m:10s])[10m:10s])',
    'count(count_values("v", secret{namespace="team-b"}))',
]


@pytest.mark.parametrize("attack", CONFINED)
def test_attacks_are_confined(attack: str) -> None:
    scoped = scope_query(attack, SCOPE)
    assert_confined(scoped)
    assert scoped.count('namespace="team-a"') == len(selectors(scoped))


def test_an_injected_quote_stays_inside_its_label_value() -> None:
    scoped = scope_query(r'up{job="\"} or secret{b=\""}', SCOPE)
    (selector,) = selectors(scoped)
    pairs = [(m.name, m.value) for m in selector.matchers.matchers]
    assert pairs == [("__name__", "up"), ("job", '"} or secret{b="'), ("namespace", "team-a")]


def test_the_tenants_own_namespace_matcher_is_not_repeated() -> None:
    assert scope_query('up{namespace="team-a"}', SCOPE) == '{__name__="up", namespace="team-a"}'


def test_a_conflicting_namespace_can_only_match_nothing() -> None:
    assert scope_query('up{namespace="team-b"}', SCOPE) == '{__name__="up", namespace="team-b", namespace="team-a"}'


def test_the_label_is_the_configured_one() -> None:
    scope = TenantScope("team-a", "exported_namespace")
    scoped = scope_query("up", scope)
    assert scoped == '{__name__="up", exported_namespace="team-a"}'
    assert_confined(scoped, scope)


REFUSED = [
    ("sum(", "not valid PromQL"),
    ("", "not valid PromQL"),
    ("info(up)", "info() reads series beyond its arguments"),
    ('up{job="a" or namespace="team-b"}', "'or' between label matchers"),
    ("rate(up[2d])", "may reach back 1d (ranges and offsets added up); this one, 2d"),
    ("up offset 25h", "this one, 1d1h"),
    ("max_over_time(rate(up[1h] offset 20h)[4h:])", "this one, 1d1h"),
    ("max_over_time(rate(up[1h] offset -20h)[4h:])", "this one, 1d1h"),
    ("max_over_time(rate(up[1h])[4h:] offset 20h)", "this one, 1d1h"),
    ("up @ 1609746000", "@ a fixed time is not allowed"),
    ("max_over_time(up[1d:1ms])", "at most 11000 times, nested ones multiplied; this one, 86400000"),
    ("max_over_time(up[4h:1s])", "this one, 14400"),
    # Each subquery alone is allowed; nested, their steps multiply.
    ("max_over_time(max_over_time(up[1h:1s])[1h:1s])", "this one, 3600 x 3600 = 12960000"),
    ("max_over_time(max_over_time(max_over_time(up[1m:1s])[1m:1s])[1m:1s])", "60 x 60 x 60 = 216000"),
    ("max_over_time((max_over_time(up[1h:1s]) + 1)[1h:1s])", "3600 x 3600"),
    ("max_over_time(max_over_time(up[10m:10s])[10m:10s])", None),  # 60 + 60 x 60 evaluations
    # Side by side, each allowed alone: their evaluations add up.
    (" + ".join(["max_over_time(up[1h:1s])"] * 3), None),
    (" + ".join(["max_over_time(up[1h:1s])"] * 4), "at most 11000 times in all, nested ones multiplied"),
    (" + ".join(["max_over_time(rate(up[5m])[12h:])"] * 3), "may read 1w of samples per series in all"),
    ("max_over_time(rate(up[5m])[1h:1s])", "may read 1w of samples per series"),
    ("max_over_time(rate(up[5m])[12h:])", None),  # 720 five-minute windows: two and a half days
    # Sample values made labels: a new series at every step of every subquery around it.
    ('max_over_time(count(count_values("v", timestamp(vector(1))))[1h:1s])', "count_values() inside a subquery"),
    (  # the attack as it was sent: refused twice over, its steps' product first
        'max_over_time(max_over_time(count_values("v", timestamp(vector(1)))[1h:1s])[1h:1s])',
        "3600 x 3600 = 12960000",
    ),
    (
        'max_over_time(max_over_time(count_values("v", timestamp(vector(1)))[10m:10s])[10m:10s])',
        "count_values() inside a subquery",
    ),
    ('count(count_values("v", up))', None),  # one evaluation: no more series than it was given
    ('max_over_time(label_replace(vector(1), "a", "b", "", "")[10m:10s])', None),  # labels from labels
    ("max_over_time(up[1d:])", None),  # 1440 steps of the default minute: allowed
    ("(" * 70 + "up" + ")" * 70, "nests deeper than 64"),
]


@pytest.mark.parametrize(("query", "why"), REFUSED)
def test_what_cannot_be_scoped_is_refused(query: str, why: str | None) -> None:
    if why is None:
        assert_confined(scope_query(query, SCOPE))
        return
    with pytest.raises(QueryRefusedError, match=re.escape(why)):
        scope_query(query, SCOPE)


def test_a_label_that_is_no_label_name_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="not a label name"):
        scope_query("up", TenantScope("team-a", 'namespace="x'))


# -- cost of the whole expression ------------------------------------------------------------


def children(node: pp.Expr) -> list[pp.Expr]:
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return [node.expr]
    return []


def cost(node: pp.Expr, evaluations: int = 1) -> tuple[int, float, bool]:
    """(evaluations of subqueries' expressions in all, seconds of samples the ranges read in all, count_values
    under a subquery), counted here again from the tree Prometheus would evaluate."""
    if isinstance(node, pp.MatrixSelector):
        return 0, node.range.total_seconds() * evaluations, False
    spent = 0
    if isinstance(node, pp.SubqueryExpr):
        assert node.range is not None, "the scoping refuses a subquery without a range"
        step = node.step or timedelta(minutes=1)
        evaluations *= max(1, -(-node.range // step))
        spent = evaluations
    value_labels = isinstance(node, pp.AggregateExpr) and str(node.op) in VALUE_LABELLING and evaluations > 1
    read = 0.0
    for child in children(node):
        child_spent, child_read, child_labels = cost(child, evaluations)
        spent, read, value_labels = spent + child_spent, read + child_read, value_labels or child_labels
    return spent, read, value_labels


@settings(max_examples=400, deadline=None)
@given(expressions())
def test_what_is_sent_costs_at_most_the_bounds_as_a_whole(query: str) -> None:
    try:
        scoped = scope_query(query, SCOPE)
    except QueryRefusedError:
        return
    evaluations, read, value_labels = cost(pp.parse(scoped))
    assert evaluations <= MAX_EVALUATIONS
    assert read <= MAX_RANGE_READ.total_seconds()
    assert not value_labels


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.sampled_from([1, 10, 60])), min_size=1, max_size=4),
    st.booleans(),
)
def test_nested_subqueries_are_refused_by_their_evaluations_multiplied_through_the_nesting(
    windows: list[tuple[int, int]], value_labels: bool
) -> None:
    query = 'count_values("v", timestamp(vector(1)))' if value_labels else "up"
    for steps, step_seconds in windows:
        query = f"max_over_time(({query})[{steps * step_seconds}s:{step_seconds}s])"
    # The outermost is evaluated its steps' times, the next that times its own, and so on in.
    total, product = 0, 1
    for steps, _ in reversed(windows):
        product *= steps
        total += product
    if total > MAX_EVALUATIONS:
        with pytest.raises(QueryRefusedError, match="nested ones multiplied"):
            scope_query(query, SCOPE)
    elif value_labels:
        with pytest.raises(QueryRefusedError, match="count_values"):
            scope_query(query, SCOPE)
    else:
        assert_confined(scope_query(query, SCOPE))
