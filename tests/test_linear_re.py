"""irsurgeon.core.linear_re: the answer of `re.match(pattern, name) is not None`, without backtracking: in time linear
in the name, at most quadratic with look-arounds."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from irsurgeon.core.linear_re import MAX_STATES, MAX_STEPS, TooCostly, Unsupported, compile_pattern

NAMES = ["mtp.layers.0.self_attn.q_proj", "model.layers.12.mlp.gate_proj", "lm_head", "", "a", "ab", "abc\n",
         "aaab", "x_1 y", "é.ß9٣", "down_proj\n", "mtp.layers.0.mlp.experts.7.down_proj",
         "model.layers.3.mlp.experts.7.down_proj", "model.layers.0.mlp.shared_expert.gate_proj"]
PATTERNS = [r".*mtp\..*proj$", r".*mtp\..*self_attn\..*proj$", r".*down_proj$", r"lm_head", r"model\.layers\.\d+\.mlp",
            r"(q|k|v)_proj", r".*\.(gate|up)_proj\Z", r"^mtp", r"\bmlp\b", r"mt\B", r"[^.]+\.", r"[a-c]{2,3}",
            r"a*?b", r"a++b", r"(?:ab|a)*c?", r"x{0}", r"", r"a|", r"[\w.]+$", r"\s*\S+", r"\d", r"\D+\d", r"\W",
            r"[^\d\s]*", r".{3,}", r"(a*)*$", r"(a|ab)(c|bcd)?", r"\Aa\Z", r"é|ß|٣",
            # look-arounds as compressed-tensors' tools write them (llm-compressor recipes, a graft's narrowed ignore,
            # an MTP release keeping its MTP experts apart), and look-behinds
            r"(?!.*experts).*Linear", r"(?!(?:lm_head|mtp\.fc)$)(?:.*_proj$)",
            r"(?!.*(?:mtp|stages)\.\d+\.).*(?:mlp|ffn)\.experts\.\d+\.(?:gate_proj|up_proj|down_proj|w[123])$",
            r".*(?<=\.)q_proj", r".*(?<!mtp\.)layers\.", r"(?=m)(?!mtp)\w+", r"(?:(?!_).)*$"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_answer_is_pythons_for_the_patterns_checkpoints_use(pattern):
    compiled = compile_pattern(pattern)
    assert [compiled.match(n) for n in NAMES] == [re.match(pattern, n) is not None for n in NAMES]


ATOMS = st.sampled_from(["a", "b", ".", r"\.", "[ab]", "[^a]", r"\d", r"\w", "_", "(a|b)", "(a|ab)", "(?:b.)",
                         "^", "$", r"\b", "(?=a)", "(?!b)", "(?<=a)", "(?<!.)", "(?!a.*b)"])
QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,3}", "*?", "{0,2}"])


@st.composite
def patterns(draw, depth: int = 2) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth and draw(st.booleans()):
            inner = draw(patterns(depth - 1))
            atom = f"({inner}|{draw(patterns(depth - 1))})" if draw(st.booleans()) else f"({inner})"
        else:
            atom = draw(ATOMS)
        quantifier = draw(QUANTIFIERS) if not (atom in ("^", "$", r"\b") or atom.startswith("(?")) or \
            atom.startswith("(?:") else ""
        parts.append(atom + quantifier)
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(patterns(), st.lists(st.text(alphabet="ab._1 \n", max_size=12), min_size=1, max_size=6))
def test_the_answer_is_pythons_for_any_pattern_of_its_kind(pattern, names):
    compiled = compile_pattern(pattern)
    assert [compiled.match(n) for n in names] == [re.match(pattern, n) is not None for n in names], pattern


@pytest.mark.parametrize("pattern, name", [
    (r"(a+)+$", "a" * 5000 + "b"),           # exponential in Python's re: hours past 40 characters
    (r"(.|.)*z$", "mtp.layers.0.mlp.down_proj" * 100),
    (r"(a|aa)*c", "a" * 5000),
    (r"(.*)(.*)(.*)(.*)x", "y" * 2000),        # n^4 in Python's re
])
def test_a_pattern_that_backtracks_is_answered_in_linear_steps(pattern, name):
    compiled = compile_pattern(pattern)
    assert compiled.match(name) is False
    assert compiled.steps <= (len(name) + 1) * compiled.size  # each state at most once a position
    assert compiled.match(name[:20]) == (re.match(pattern, name[:20]) is not None)  # short enough for re


@pytest.mark.parametrize("pattern, words", [
    (r"(a)\1", "a back-reference"), (r"(?>a+)b", "an atomic group"), (r"(a)?(?(1)b|c)", "a conditional group"),
    (r"(?<=a|bc)d", "a look-behind of varying width"), (r"(?i)mtp", "inline flags"),
    (r"(?i:mtp)", "inline flags"), (r"(?:a{1000}){30}", f"more than {MAX_STATES} automaton states"),
    ("(" * 5000 + "a" + ")" * 5000, "groups nested too deep"), ("a" * 30000, "automaton states"),
    ("|".join(f"x{i}y" for i in range(12000)), "automaton states"),
], ids=lambda v: v if len(v) < 40 else f"{v[:20]}...({len(v)} chars)")
def test_what_it_does_not_take_is_refused_by_name(pattern, words):
    with pytest.raises(Unsupported, match=re.escape(words)):
        compile_pattern(pattern)


def test_what_python_refuses_is_pythons_error():
    with pytest.raises(re.error):
        compile_pattern("mtp.(q|k")


def test_look_arounds_in_repeats_over_a_long_name_stop_at_the_step_bound():
    """Each position's look-around runs once (remembered for the match), so `(?:(?=.*b$).)*c` costs about n^2 / 2
    states over n characters, every look-ahead reading to the end: past MAX_STEPS the answer is an error, never an
    hour's wait."""
    pattern = r"(?:(?=.*b$).)*c"
    compiled = compile_pattern(pattern)
    short = "a" * 300 + "b"
    assert compiled.match(short) == (re.match(pattern, short) is not None) and 300 ** 2 / 2 < compiled.steps < MAX_STEPS
    with pytest.raises(TooCostly, match=f"more than {MAX_STEPS} automaton states for a name of 5001 characters"):
        compiled.match("a" * 5000 + "b")
