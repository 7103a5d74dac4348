"""How irsurgeon states a speed and judges one configuration against another: one rule for `verify --genai` and
`tune` (flows/genai.py times the rounds; this module only reads them).

A configuration is timed in rounds, each one pass over the same prompts with the same number of new tokens (EOS
ignored). Its speed is the median over rounds of tokens per second, its spread the range from its slowest to its
fastest round (min-max); from TRIM_FROM rounds on, the range a verdict is judged by sets aside its one slowest and
one fastest round (Spread.judged): on a shared machine one stalled round (another job took the cores for a moment)
would otherwise put every configuration within noise of every other, and one lucky round decide nothing. The rule
(RULE):
    A beats B      when A's slowest (judged) round is faster than B's fastest: their judged ranges do not overlap
    within noise   when the ranges overlap; also whenever either was timed in one round only (no spread measured)
Tokens per second are all that is timed. Acceptance under greedy decoding is counted, not timed: the same prompts
give the same counts on every run, so a reading (flows/tune.py) is judged by them and needs no rounds.

num_assistant_tokens (choose_k): the K with the highest median must beat plain generation by RULE, else no K is chosen
and openvino-genai's default stays. It is chosen when it also beats every other K; the Ks within noise of it that beat
plain generation too are as good as far as the rounds can tell, and the smallest of them (the simplest: fewest
drafts computed per step) is chosen. Among other
alternatives (choose_fastest: a draft's weight formats), the fastest replaces the present one only when it beats
every other by RULE; otherwise the present one stays.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

FASTER, SLOWER, NOISE = "faster", "slower", "within noise"
TRIM_FROM = 5  # rounds: from this many, a verdict sets aside each configuration's slowest and fastest round
RULE = ("a configuration beats another only when its slowest round is faster than the other's fastest (their min-max "
        f"ranges apart; from {TRIM_FROM} rounds on, each one's slowest and fastest round set aside); overlapping "
        "ranges, or a single round, are within noise")
K_RULE = (f"a K is chosen only when the fastest beats plain generation ({RULE}); among the Ks that beat plain "
          f"generation within noise of the fastest, the smallest; else openvino-genai's default stays")


@dataclass(frozen=True)
class Spread:
    """The rates of a configuration's rounds (tokens per second), sorted."""
    rates: tuple[float, ...]

    @classmethod
    def of(cls, rates) -> Spread:
        return cls(tuple(sorted(rates)))

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def low(self) -> float:
        return self.rates[0] if self.rates else 0.0

    @property
    def high(self) -> float:
        return self.rates[-1] if self.rates else 0.0

    @property
    def judged(self) -> tuple[float, float]:
        """The range a verdict is judged by: min-max, without the slowest and the fastest round from TRIM_FROM
        rounds on."""
        kept = self.rates[1:-1] if len(self.rates) >= TRIM_FROM else self.rates
        return (kept[0], kept[-1]) if kept else (0.0, 0.0)

    def text(self) -> str:
        """`median (min-max)` as the tables print it."""
        return f"{self.median:.1f} ({self.low:.0f}-{self.high:.0f})"


def judge(a: Spread, b: Spread) -> str:
    """FASTER, SLOWER or NOISE: how `a` compares with `b` by RULE."""
    if len(a.rates) < 2 or len(b.rates) < 2:
        return NOISE
    (a_low, a_high), (b_low, b_high) = a.judged, b.judged
    if a_low > b_high:
        return FASTER
    if a_high < b_low:
        return SLOWER
    return NOISE


@dataclass(frozen=True)
class KChoice:
    """The K choose_k settled on (None: none beat the rest beyond noise) and why, in one line."""
    k: int | None
    why: str


def choose_k(plain: Spread, ks: dict[int, Spread]) -> KChoice:
    """The fastest K by median, chosen only when it beats plain generation and every other K by RULE."""
    if not ks:
        return KChoice(None, "no K was measured")
    best = max(ks, key=lambda k: (ks[k].median, -k))
    speedup = ks[best].median / plain.median if plain.median else 0.0
    if (versus := judge(ks[best], plain)) != FASTER:
        how = "within noise of it" if versus == NOISE else "slower beyond the rounds' spread"
        return KChoice(None, f"the fastest K, {best}, runs at {speedup:.2f}x plain generation: {how}")
    close = sorted(k for k in ks if k != best and judge(ks[best], ks[k]) != FASTER)
    if not close:
        return KChoice(best, f"K={best} runs at {speedup:.2f}x plain generation, beyond the rounds' spread of plain "
                             f"generation and of every other K")
    simplest = min([best] + [k for k in close if judge(ks[k], plain) == FASTER])
    ratio = ks[simplest].median / plain.median
    return KChoice(simplest, f"K={best} runs fastest ({speedup:.2f}x plain generation, beyond its spread), within "
                             f"noise of K={', '.join(map(str, close))}; the smallest of these that beats plain "
                             f"generation beyond its spread, K={simplest} ({ratio:.2f}x), is chosen")


def machine(device: str) -> dict:
    """Where a speed was measured, as a record states it: the CPU's model name (/proc/cpuinfo, where there is one),
    its logical cores, the OpenVINO device and the openvino-genai version."""
    import os
    import platform
    from importlib.metadata import PackageNotFoundError, version
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass  # not Linux: platform's answer stands
    try:
        genai = version("openvino-genai")
    except PackageNotFoundError:
        genai = None
    return {"cpu": cpu[:80], "logical_cores": os.cpu_count(), "device": device, "openvino_genai": genai}


def choose_fastest(spreads: dict[str, Spread], present: str) -> tuple[str, str]:
    """The alternative to keep, and why: the fastest by median when it beats every other by RULE, else `present`."""
    best = max(spreads, key=lambda name: (spreads[name].median, name == present))
    if best == present:
        return present, f"{present} runs fastest"
    close = [name for name in spreads if name != best and judge(spreads[best], spreads[name]) != FASTER]
    if close:
        return present, f"{best} runs fastest but within noise of {', '.join(sorted(close))}: {present} stays"
    ratio = spreads[best].median / spreads[present].median if spreads[present].median else 0.0
    return best, f"{best} runs at {ratio:.2f}x {present}, beyond the rounds' spread of every other"
