"""CRRL: tokenizer, parser, canonical printing, errors and evaluation (issue 2, section 2)."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbear.crrl import Condition, CrrlSyntaxError, Statement, parse

# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("use cluster fws", Statement("fws")),
        (
            "use cluster uat when client.env=uat",
            Statement("uat", None, (Condition("client.env", "uat"),)),
        ),
        (
            "use cluster prod when client.env=prod and topic.bu=hotel",
            Statement("prod", None, (Condition("client.env", "prod"), Condition("topic.bu", "hotel"))),
        ),
        ("use cluster c1, topic t1", Statement("c1", "t1")),
        (
            "use cluster c1, topic t1 when topic.id=t1 and client.id=c1",
            Statement("c1", "t1", (Condition("topic.id", "t1"), Condition("client.id", "c1"))),
        ),
    ],
)
def test_spec_statements_parse(text: str, expected: Statement) -> None:
    assert parse(text) == expected


def test_canonical_form_of_a_remap_with_conditions() -> None:
    text = "use cluster c1, topic t1 when topic.id=t1 and client.id=c1"
    assert str(parse(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "  use cluster c1 , topic t1 when topic.id = t1 and client.id= c1  ",
        "use\tcluster\t\tc1,topic\tt1\twhen\ttopic.id=t1\tand\tclient.id=c1",
        "use cluster c1,topic t1 when topic.id=t1 and client.id=c1",
        "\t use  cluster   c1 ,  topic   t1   when   topic.id  =t1    and  client.id =c1\t",
    ],
)
def test_any_spaces_or_tabs_between_tokens(text: str) -> None:
    s = parse(text)
    assert s == Statement("c1", "t1", (Condition("topic.id", "t1"), Condition("client.id", "c1")))
    assert str(s) == "use cluster c1, topic t1 when topic.id=t1 and client.id=c1"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('use cluster c when topic.bu="hotel and spa"', "hotel and spa"),
        ('use cluster c when topic.bu="a=b"', "a=b"),
        ('use cluster c when topic.bu="a,b"', "a,b"),
        ('use cluster c when topic.bu="and"', "and"),
        ('use cluster c when topic.bu="when"', "when"),
        ('use cluster c when topic.bu="use cluster x"', "use cluster x"),
        ('use cluster c when topic.bu=""', ""),
        (r'use cluster c when topic.bu="say \"hi\""', 'say "hi"'),
        (r'use cluster c when topic.bu="back\\slash"', "back\\slash"),
        (r'use cluster c when topic.bu="\\\""', '\\"'),
        ('use cluster c when topic.bu="tab\there"', "tab\there"),
    ],
)
def test_quoted_values_hold_spaces_specials_keywords_and_escapes(text: str, value: str) -> None:
    s = parse(text)
    assert s.conditions == (Condition("topic.bu", value),)
    printed = str(s)
    assert parse(printed) == s
    # The canonical form is itself canonical.
    assert str(parse(printed)) == printed


def test_quoted_cluster_topic_and_key_round_trip() -> None:
    s = Statement("my cluster", "and", (Condition("when", "x=y, z"), Condition("k", 'q"\\')))
    printed = str(s)
    assert printed == r'use cluster "my cluster", topic "and" when "when"="x=y, z" and k="q\"\\"'
    assert parse(printed) == s


def test_plain_words_print_bare_and_only_what_needs_it_is_quoted() -> None:
    s = parse('use cluster "prod" when client.env="uat" and topic.bu="hotel and spa"')
    assert str(s) == 'use cluster prod when client.env=uat and topic.bu="hotel and spa"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("use cluster sandbox", Statement("sandbox")),
        (
            "use cluster brand when client.env=sandbox",
            Statement("brand", None, (Condition("client.env", "sandbox"),)),
        ),
        ("use cluster c when client.os=android", Statement("c", None, (Condition("client.os", "android"),))),
        ("use cluster c when client.x=AND", Statement("c", None, (Condition("client.x", "AND"),))),
        (
            "use cluster c when brand=AND and android=sandbox",
            Statement("c", None, (Condition("brand", "AND"), Condition("android", "sandbox"))),
        ),
        ("use cluster c, topic topics when client.x=When", None),
        ("use cluster Use, topic Cluster", Statement("Use", "Cluster")),
        ("use cluster usecluster when whenand=andwhen", None),
    ],
)
def test_keywords_are_only_whole_lowercase_words(text: str, expected: Statement | None) -> None:
    s = parse(text)
    if expected is not None:
        assert s == expected
    assert parse(str(s)) == s
    assert str(s) == text


def test_keyword_glued_to_a_value_is_part_of_the_value() -> None:
    # "sandbox" contains "and"; "brand" ends with "and": neither splits the condition.
    s = parse("use cluster c when client.env=sandbox and topic.bu=brand")
    assert s.conditions == (Condition("client.env", "sandbox"), Condition("topic.bu", "brand"))


# --------------------------------------------------------------------------- errors


def _col(text: str, needle: str) -> int:
    return text.index(needle) + 1


def test_uppercase_and_error_reads_as_in_the_issue() -> None:
    text = "use cluster c when topic.id=t AND client.id=x"
    assert _col(text, "AND") == 31
    with pytest.raises(CrrlSyntaxError) as info:
        parse(text)
    err = info.value
    assert str(err) == "expected 'and' or end of rule at column 31, found 'AND'"
    assert err.text == text
    assert err.column == 31
    assert err.expected == "'and' or end of rule"
    assert err.found == "'AND'"


def test_syntax_error_is_a_value_error() -> None:
    assert issubclass(CrrlSyntaxError, ValueError)
    with pytest.raises(ValueError, match="column"):
        parse("use clusters x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected 'use' at column 1, found end of rule"),
        ("   ", "expected 'use' at column 4, found end of rule"),
        ("USE cluster c", "expected 'use' at column 1, found 'USE'"),
        ("route cluster c", "expected 'use' at column 1, found 'route'"),
        ("use", "expected 'cluster' at column 4, found end of rule"),
        ("use Cluster c", "expected 'cluster' at column 5, found 'Cluster'"),
        ("use cluster", "expected a cluster id at column 12, found end of rule"),
        ("use cluster =", "expected a cluster id at column 13, found '='"),
        (
            "use cluster when",
            "expected a cluster id (quote a keyword used as a name) at column 13, found 'when'",
        ),
        ("use cluster c d", "expected ',', 'when' or end of rule at column 15, found 'd'"),
        ("use cluster c,", "expected 'topic' at column 15, found end of rule"),
        ("use cluster c, when a=b", "expected 'topic' at column 16, found 'when'"),
        ("use cluster c, topic", "expected a topic name at column 21, found end of rule"),
        ("use cluster c, topic t, topic u", "expected 'when' or end of rule at column 23, found ','"),
        ("use cluster c, topic t WHEN a=b", "expected 'when' or end of rule at column 24, found 'WHEN'"),
        ("use cluster c when", "expected a factor key at column 19, found end of rule"),
        ("use cluster c when =b", "expected a factor key at column 20, found '='"),
        ("use cluster c when a", "expected '=' at column 21, found end of rule"),
        ("use cluster c when a b", "expected '=' at column 22, found 'b'"),
        ("use cluster c when a=", "expected a factor value at column 22, found end of rule"),
        ("use cluster c when a==b", "expected a factor value at column 22, found '='"),
        (
            "use cluster c when a=and",
            "expected a factor value (quote a keyword used as a name) at column 22, found 'and'",
        ),
        ("use cluster c when a=b and", "expected a factor key at column 27, found end of rule"),
        ("use cluster c when a=b c=d", "expected 'and' or end of rule at column 24, found 'c'"),
        ("use cluster c when a=b, c=d", "expected 'and' or end of rule at column 23, found ','"),
        ('use cluster c when a=b "x"', "expected 'and' or end of rule at column 24, found \"x\""),
        ('use cluster "c', "expected closing '\"' at column 15, found end of rule"),
        ('use cluster c when a="b', "expected closing '\"' at column 24, found end of rule"),
        (r'use cluster "a\nb"', "expected '\\\"' or '\\\\' at column 15, found '\\n'"),
        ('use cluster "a\\', "expected '\\\"' or '\\\\' at column 15, found end of rule"),
    ],
)
def test_every_error_class_has_message_and_column(text: str, message: str) -> None:
    with pytest.raises(CrrlSyntaxError) as info:
        parse(text)
    assert str(info.value) == message
    assert info.value.text == text
    assert f"at column {info.value.column}," in message


def test_error_column_counts_tabs_as_one_character() -> None:
    text = "use\tcluster\tc\twhen\ta=b\tOR\tx=y"
    with pytest.raises(CrrlSyntaxError) as info:
        parse(text)
    assert info.value.column == _col(text, "OR")
    assert info.value.found == "'OR'"


# --------------------------------------------------------------------------- evaluation


def test_statement_without_when_always_matches() -> None:
    s = parse("use cluster fws")
    assert s.matches({})
    assert s.matches({"client.env": "anything"})


def test_every_condition_must_hold() -> None:
    s = parse("use cluster prod when client.env=prod and topic.bu=hotel")
    assert s.matches({"client.env": "prod", "topic.bu": "hotel", "topic.id": "x"})
    assert not s.matches({"client.env": "prod", "topic.bu": "flight"})
    assert not s.matches({"client.env": "uat", "topic.bu": "hotel"})


def test_equality_is_exact_and_case_sensitive() -> None:
    s = parse("use cluster uat when client.env=UAT")
    assert s.matches({"client.env": "UAT"})
    assert not s.matches({"client.env": "uat"})
    assert not s.matches({"client.env": "UAT "})
    assert not s.matches({"client.env": "UA"})
    assert not s.matches({"Client.env": "UAT"})


def test_absent_factor_never_matches_even_an_empty_value() -> None:
    s = parse('use cluster c when client.env=""')
    assert not s.matches({})
    assert s.matches({"client.env": ""})
    assert not parse("use cluster c when consumerGroup.groupName=g").matches({"topic.id": "t"})


def test_quoted_value_matches_its_unquoted_content() -> None:
    s = parse('use cluster c when topic.bu="hotel and spa"')
    assert s.matches({"topic.bu": "hotel and spa"})
    assert not s.matches({"topic.bu": '"hotel and spa"'})


# --------------------------------------------------------------------------- properties

_names = st.text(max_size=12)
_statements = st.builds(
    Statement,
    cluster=_names,
    topic=st.none() | _names,
    conditions=st.lists(st.builds(Condition, key=_names, value=_names), max_size=4).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(_statements)
def test_parse_of_str_is_the_same_statement(s: Statement) -> None:
    printed = str(s)
    assert parse(printed) == s
    assert str(parse(printed)) == printed


_crrl_alphabet = st.sampled_from(
    ["use", "cluster", "topic", "when", "and", "AND", "c", "k.x", " ", "\t", ",", "=", '"', "\\", "x y"]
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.lists(_crrl_alphabet, max_size=14).map(" ".join))
def test_arbitrary_text_parses_or_raises_crrl_syntax_error(text: str) -> None:
    try:
        s = parse(text)
    except CrrlSyntaxError as err:
        assert err.text == text
        assert 1 <= err.column <= len(text) + 1
        assert str(err) == f"expected {err.expected} at column {err.column}, found {err.found}"
    else:
        assert parse(str(s)) == s


def test_syntax_error_survives_pickle_and_copy() -> None:
    with pytest.raises(CrrlSyntaxError) as info:
        parse("use cluster c when topic.id=t AND client.id=x")
    for clone in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value)):
        assert isinstance(clone, CrrlSyntaxError)
        assert (clone.text, clone.column, clone.expected, clone.found) == (
            info.value.text,
            31,
            "'and' or end of rule",
            "'AND'",
        )
        assert str(clone) == str(info.value)


def test_statements_survive_pickle() -> None:
    s = parse('use cluster c, topic t when a="x y"')
    assert pickle.loads(pickle.dumps(s)) == s
