"""`re.match(pattern, name) is not None` for patterns read from a checkpoint, without backtracking: in time linear in
the name, at most quadratic with look-arounds, and never past MAX_STEPS.

Why not `re` itself: a checkpoint's quantization config names its modules by regular expression (compressed-tensors'
`re:` targets and ignore entries, matched with `re.match`: compressed-tensors 0.20.1 utils/match.py `match_name`), and
Python's backtracking engine takes exponential time on a pattern like `(a+)+$` against a name it does not match: a
downloaded config could stop a build for hours. The packages irsurgeon depends on bring no linear-time engine
(`regex` has timeouts and `google-re2` is linear, neither is a dependency), so this module simulates the pattern's
Thompson NFA: every position of the name is visited once with the set of states alive there, whatever the pattern.

The pattern is parsed by Python's own parser (`re._parser`, the module `re.compile` uses: its syntax and its errors
are Python's, a private module, so it is imported here alone and each node kind it gives is handled or refused by
name). Supported: literals, `.`, classes (ranges, negation, \\d \\w \\s and their negations, as `re` reads them for str
patterns), groups, alternation, every repeat (greedy, lazy or possessive alike: a yes/no answer does not depend on
which match is found), `^ $ \\A \\Z \\b \\B`, and look-ahead and look-behind, plain or negative: compressed-tensors'
own tools write them (llm-compressor's recipes target `re:(?!.*experts).*Linear`; an ignore entry narrowed by a graft
is `re:(?!(?:NAMES))(?:PATTERN)`; an MTP release keeps its MTP experts apart with
`re:(?!.*(?:mtp|stages)\\.\\d+\\.)...`).
A look-around is its own automaton, run from its position (look-behind: its fixed width back) and remembered per
position within a match, so a name of n characters costs at most n runs of it. Refused, naming the construct:
back-references, atomic and conditional groups, inline flags, a pattern whose automaton would exceed MAX_STATES (a
counted repeat is unrolled), and a match that would visit more than MAX_STEPS states (look-arounds nested in
repeats over a very long name), which is an error, never an answer.
"""
from __future__ import annotations

try:
    from re import _constants as C, _parser as parser  # Python 3.11+
except ImportError:  # Python 3.10 and before: the same modules under their old names
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as parser  # type: ignore[no-redef]

MAX_STATES = 20_000
MAX_STEPS = 5_000_000  # states one match may visit (a few seconds): past it, TooCostly
TAKEN = ("a pattern from a checkpoint is matched without backtracking: literals, classes, groups, alternation, "
         "repeats, look-arounds and ^ $ \\A \\Z \\b \\B, no back-references, atomic or conditional groups, or inline "
         "flags")


class Unsupported(ValueError):
    """A pattern this matcher does not take (its message names the construct)."""


class TooCostly(ValueError):
    """A match that would visit more than MAX_STEPS states."""


class Pattern:
    """A compiled pattern: `match(name)` is `re.match(pattern, name) is not None`."""

    def __init__(self, pattern: str):
        parsed = parser.parse(pattern)  # re.error for what `re` itself refuses
        if parsed.state.flags & ~C.SRE_FLAG_UNICODE:
            raise Unsupported("inline flags")
        self._build(list(parsed))

    @classmethod
    def _of(cls, items: list) -> "Pattern":
        """The automaton of parsed items (a look-around's)."""
        made = cls.__new__(cls)
        made._build(items)
        return made

    def _build(self, items: list) -> None:
        self._states: list[tuple] = []  # (kind, arg, out): kind "char" (arg a predicate), "split" (arg the outs),
        #               "at" (arg the assertion code), "look" (arg (automaton, behind width or None, negated)), "match"
        start, ends = self._sequence(items)
        final = self._add("match", None, None)
        self._patch(ends, final)
        self._start = start
        self.steps = 0  # states the last match visited: at most (len(name) + 1) * size

    # -- building ---------------------------------------------------------------------------------------------------
    def _add(self, kind: str, arg, out) -> int:
        if len(self._states) >= MAX_STATES:
            raise Unsupported(f"more than {MAX_STATES} automaton states (a pattern this long, or a large counted "
                              f"repeat)")
        self._states.append([kind, arg, out])
        return len(self._states) - 1

    def _patch(self, ends: list[tuple[int, int | None]], to: int) -> None:
        for state, slot in ends:
            if slot is None:
                self._states[state][2] = to
            else:
                self._states[state][1][slot] = to

    def _sequence(self, items: list) -> tuple[int, list]:
        """A fragment for items in a row: (its first state, the dangling exits to patch)."""
        if not items:
            state = self._add("split", [None], None)
            return state, [(state, 0)]
        start, ends = self._node(*items[0])
        for op, av in items[1:]:
            nxt, nxt_ends = self._node(op, av)
            self._patch(ends, nxt)
            ends = nxt_ends
        return start, ends

    def _node(self, op, av) -> tuple[int, list]:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            state = self._add("char", _predicate(op, av), None)
            return state, [(state, None)]
        if op is C.AT:
            if av not in _AT:
                raise Unsupported(f"the assertion {str(av).lower()}")
            state = self._add("at", av, None)
            return state, [(state, None)]
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, items = av
            behind = None
            if direction < 0:
                low, high = items.getwidth()
                if low != high:  # Python's re refuses it too ("look-behind requires fixed-width pattern")
                    raise Unsupported("a look-behind of varying width")
                behind = low
            look = Pattern._of(list(items))
            if len(self._states) + look.size > MAX_STATES:
                raise Unsupported(f"more than {MAX_STATES} automaton states (a pattern this long, or a large counted "
                                  f"repeat)")
            state = self._add("look", (look, behind, op is C.ASSERT_NOT), None)
            return state, [(state, None)]
        if op is C.SUBPATTERN:
            group, add_flags, del_flags, items = av
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            return self._sequence(list(items))
        if op is C.BRANCH:
            alternatives = av[1]
            split = self._add("split", [None] * len(alternatives), None)
            ends = []
            for i, items in enumerate(alternatives):
                start, alt_ends = self._sequence(list(items))
                self._states[split][1][i] = start
                ends += alt_ends
            return split, ends
        if op in _REPEATS:
            low, high, items = av
            return self._repeat(low, high, list(items))
        raise Unsupported(_NAMES.get(op, str(op).lower().replace("_", " ")))

    def _repeat(self, low: int, high: int, items: list) -> tuple[int, list]:
        """low copies in a row, then high - low optional ones (a loop when high is unbounded)."""
        first, ends = None, []
        for _ in range(low):
            start, copy_ends = self._sequence(items)
            if first is None:
                first = start
            else:
                self._patch(ends, start)
            ends = copy_ends
        if high == C.MAXREPEAT:
            loop = self._add("split", [None, None], None)
            start, body_ends = self._sequence(items)
            self._states[loop][1][0] = start
            self._patch(body_ends, loop)
            if first is None:
                first = loop
            else:
                self._patch(ends, loop)
            return first, [(loop, 1)]
        optional_ends: list = []
        for _ in range(high - low):
            skip = self._add("split", [None, None], None)
            start, copy_ends = self._sequence(items)
            self._states[skip][1][0] = start
            if first is None:
                first = skip
            else:
                self._patch(ends, skip)
            optional_ends.append((skip, 1))
            ends = copy_ends
        if first is None:  # {0,0}: matches the empty string
            return self._sequence([])
        return first, ends + optional_ends

    # -- matching ---------------------------------------------------------------------------------------------------
    def match(self, name: str) -> bool:
        self.steps = 0
        return self._run(name, 0, {})

    def _run(self, name: str, start: int, seen_looks: dict) -> bool:
        """Whether the pattern matches name from `start` on (as re.match: ending anywhere; a look-behind's automaton,
        of one fixed width, can only end that width on)."""
        alive = self._closure([self._start], name, start, seen_looks)
        for pos in range(start, len(name)):
            if self._final in alive:
                return True
            ch = name[pos]
            stepped = [state[2] for i in alive if (state := self._states[i])[0] == "char" and state[1](ch)]
            if not stepped:
                return False
            alive = self._closure(stepped, name, pos + 1, seen_looks)
        return self._final in alive

    @property
    def size(self) -> int:
        """The automaton's states."""
        return len(self._states)

    @property
    def _final(self) -> int:
        return len(self._states) - 1

    def _closure(self, starts: list[int], name: str, pos: int, seen_looks: dict) -> set[int]:
        """The states reachable from starts without reading a character, assertions and look-arounds judged at pos;
        the "char" and "match" states among them. seen_looks: each look-around's answer per position, this match."""
        seen, out, stack = set(), set(), list(starts)
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise TooCostly(f"matching it visits more than {MAX_STEPS} automaton states for a name of "
                                f"{len(name)} characters")
            kind, arg, nxt = self._states[i]
            if kind == "split":
                stack.extend(arg)
            elif kind == "at":
                if _AT[arg](name, pos):
                    stack.append(nxt)
            elif kind == "look":
                if self._look(i, arg, name, pos, seen_looks):
                    stack.append(nxt)
            else:
                out.add(i)
        return out

    def _look(self, i: int, arg: tuple, name: str, pos: int, seen_looks: dict) -> bool:
        """Whether look-around state i holds at pos (its answer kept for this match); its steps count as this
        pattern's."""
        key = (id(self), i, pos)
        if key not in seen_looks:
            look, behind, negated = arg
            look.steps = self.steps
            found = look._run(name, pos, seen_looks) if behind is None else \
                pos >= behind and look._run(name, pos - behind, seen_looks)
            self.steps = look.steps
            seen_looks[key] = found != negated
        return seen_looks[key]


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _boundary(name: str, pos: int) -> bool:
    before = pos > 0 and _word(name[pos - 1])
    after = pos < len(name) and _word(name[pos])
    return before != after


_AT = {
    C.AT_BEGINNING: lambda name, pos: pos == 0,
    C.AT_BEGINNING_STRING: lambda name, pos: pos == 0,
    C.AT_END: lambda name, pos: pos == len(name) or (pos == len(name) - 1 and name[pos] == "\n"),
    C.AT_END_STRING: lambda name, pos: pos == len(name),
    C.AT_BOUNDARY: _boundary,
    C.AT_NON_BOUNDARY: lambda name, pos: not _boundary(name, pos),
}
# Python's `re` for str patterns (its _sre: Py_UNICODE_ISDECIMAL, ISALNUM or "_", ISSPACE, and "\n" for lines)
_CATEGORIES = {
    C.CATEGORY_DIGIT: str.isdecimal, C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    C.CATEGORY_WORD: _word, C.CATEGORY_NOT_WORD: lambda ch: not _word(ch),
    C.CATEGORY_SPACE: str.isspace, C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
}
_REPEATS = tuple(getattr(C, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(C, name))
_NAMES = {getattr(C, name): words for name, words in (
    ("GROUPREF", "a back-reference"), ("GROUPREF_EXISTS", "a conditional group"), ("ASSERT", "a look-ahead or -behind"),
    ("ASSERT_NOT", "a negative look-ahead or -behind"), ("ATOMIC_GROUP", "an atomic group")) if hasattr(C, name)}


def _predicate(op, av):
    if op is C.LITERAL:
        return lambda ch: ord(ch) == av
    if op is C.NOT_LITERAL:
        return lambda ch: ord(ch) != av
    if op is C.ANY:
        return lambda ch: ch != "\n"
    negate, tests = False, []
    for kind, value in av:
        if kind is C.NEGATE:
            negate = True
        elif kind is C.LITERAL:
            tests.append(lambda ch, c=value: ord(ch) == c)
        elif kind is C.RANGE:
            tests.append(lambda ch, lo=value[0], hi=value[1]: lo <= ord(ch) <= hi)
        elif kind is C.CATEGORY and value in _CATEGORIES:
            tests.append(_CATEGORIES[value])
        else:
            raise Unsupported(f"the class item {str(kind).lower()} {str(value).lower()}")
    return lambda ch: any(t(ch) for t in tests) != negate


def compile_pattern(pattern: str) -> Pattern:
    """The pattern compiled (re.error for what Python's re refuses, Unsupported for what this matcher does not take)."""
    try:
        return Pattern(pattern)
    except RecursionError:  # Python's parser and this builder recurse once a group level (re.compile fails the same)
        raise Unsupported("groups nested too deep") from None
