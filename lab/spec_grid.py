"""A K x weight-format grid of speculative decoding against plain generation, timed in alternating rounds: what
benchmarks/bench_tune.py holds `irsurgeon tune`'s choice against.

Every pipeline is loaded side by side in one process (plain generation, and one speculative pipeline per directory:
the same target with its draft in each format), each at the device's default precision as tune runs them. A round is
one pass over the prompts (flows.genai's timed pass: EOS ignored, every generate call timed, an untimed warm-up
before a configuration's first pass, counts from its first pass) of plain generation, then of every (format, K);
the order is reversed every other round, so that what slows the machine during a round reaches every configuration
from both ends. A configuration's speed is the median of its rounds' tokens per second, its spread their min-max
(flows.measure.Spread), the rule flows.measure.judge.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from irsurgeon.flows import genai
from irsurgeon.flows.measure import Spread


@dataclass
class Grid:
    plain: genai.Measurement
    cells: dict[tuple[str, int], genai.Measurement] = field(default_factory=dict)  # (format, K) -> measured
    seconds: float = 0.0

    def spread(self, key: tuple[str, int] | None) -> Spread:
        """A cell's spread; None: plain generation."""
        return (self.plain if key is None else self.cells[key]).spread

    @property
    def best(self) -> tuple[str, int]:
        return max(self.cells, key=lambda key: self.cells[key].tokens_per_second)


def run_grid(dirs: dict[str, Path], ks: Sequence[int], prompts: Sequence[str], max_new_tokens: int = 48,
             rounds: int = 5, device: str = "CPU", echo: Callable[[str], None] = print) -> Grid:
    """Plain generation on the first directory's target and each (format, K) of dirs x ks in alternating rounds;
    `prompts` are given as they are (rendered already)."""
    g, start = genai.genai_module(), time.perf_counter()
    first = next(iter(dirs.values()))
    _, fam = genai.runtime_of(first)
    texts = [fam.prompt(p) for p in prompts]
    plain_pipe = fam.pipeline(g, first, device, {}, False)
    pipes = {fmt: fam.pipeline(g, d, device, {}, True, max_assistant_tokens=max(ks)) for fmt, d in dirs.items()}
    grid = Grid(genai.Measurement("plain", None, 0, 0, drafted=fam.drafted))
    for fmt in dirs:
        for k in ks:
            grid.cells[fmt, k] = genai.Measurement(f"{fmt} K={k}", k, 0, 0, drafted=fam.drafted)
    order = [None, *grid.cells]
    for r in range(rounds):
        rates = {}
        for key in order if r % 2 == 0 else order[::-1]:
            pipe, m = (plain_pipe, grid.plain) if key is None else (pipes[key[0]], grid.cells[key])
            config = genai._config(g, max_new_tokens, None if key is None else key[1])
            rates[key] = genai._timed_pass(pipe, texts, config, m)
        echo(f"   round {r + 1}/{rounds}: plain {rates[None]:.1f}, " + ", ".join(
            f"{fmt} K={k} {rates[fmt, k]:.1f}" for fmt, k in grid.cells) + " tok/s")
    base = grid.plain.tokens_per_second
    for m in (grid.plain, *grid.cells.values()):
        m.speedup = m.tokens_per_second / base if base else None
    grid.seconds = time.perf_counter() - start
    return grid
