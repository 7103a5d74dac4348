"""The registered draft families, and how the flows find the one a checkpoint or a directory belongs to.

Adding a family: a package under irsurgeon.families with its `FAMILY` (draft.protocol.Family), and one line in
FAMILIES. Nothing else in the house names a family.
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import checked_model_type, peek_json
from irsurgeon.core.errors import ConfigError
from irsurgeon.families import dflash, eagle3, gemma4_mtp, qwen35_mtp
from irsurgeon.draft.protocol import Family, Match
from irsurgeon.ir.export import GENERATION_CONFIG
from irsurgeon.weights.held import NOTHING_HELD, Held

FAMILIES: tuple[Family, ...] = (
    qwen35_mtp.FAMILY,
    gemma4_mtp.FAMILY,
    dflash.FAMILY,
    eagle3.FAMILY,
)
HOUSE_WRITES = (GENERATION_CONFIG,)  # the target's, where `tune` writes num_assistant_tokens (flows/tune.py)
DEFAULT = FAMILIES[0]  # what a directory that no family recognises is checked as (its layout errors name why)


def by_key(key: str) -> Family:
    for family in FAMILIES:
        if family.key == key:
            return family
    raise KeyError(key)


def for_config(config: dict, source: str, held: Held = NOTHING_HELD) -> Family:
    """Whose checkpoint is this: the family that claims this config.json and what the checkpoint holds
    (Family.claims; held: its tensor names, read only if a family asks), or a ConfigError listing what each family
    takes (or naming a model_type that is not a string: config.checked_model_type). The one answer: every flow asks
    it (for_checkpoint too)."""
    checked_model_type(config, source)
    for family in FAMILIES:
        if family.claims(config, held):
            return family
    known = "; ".join(f"{f.title}: {f.claimed()}" for f in FAMILIES)
    raise ConfigError(f"{source}: model_type {config.get('model_type')!r:.80} has no supported draft family "
                      f"(expected {known})")


def for_checkpoint(root: Path) -> Family | None:
    """The family of a local checkpoint directory's config.json, or None when it has none a family claims (the
    flow that then runs reads the same file and reports what is wrong with it); a model_type that is not a string
    is refused (config.peek_json)."""
    config = peek_json(Path(root) / "config.json")
    if config is None:
        return None
    try:
        return for_config(config, str(Path(root) / "config.json"), Held(root))
    except ConfigError:
        return None  # no family's: the flow that runs next reads the same file and says what is wrong with it


def for_directory(directory: Path) -> Family:
    """The family a directory belongs to: the one whose draft is there, else whose target it is, else DEFAULT. A
    config.json whose model_type is not a string is a ConfigError (config.peek_json), never a directory of no
    family's kind checked as DEFAULT's."""
    best, match = DEFAULT, Match.NONE
    for family in FAMILIES:
        found = family.recognise(Path(directory))
        if found > match:
            best, match = family, found
    return best


def writable() -> frozenset[str]:
    """Every name any family's patch, or tune, moves into a target: what a commit journal may name
    (irsurgeon.commit.journal)."""
    return frozenset(n for f in FAMILIES for n in f.layout.writes) | frozenset(HOUSE_WRITES)


def titles() -> str:
    """The families in words, for help texts: "A, B and C"."""
    names = [f.title for f in FAMILIES]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def standalone() -> Family:
    """The family whose draft `build-mtp` writes alone (Family.standalone)."""
    return next(f for f in FAMILIES if f.standalone)


def synth_kinds() -> dict[str, Family]:
    return {kind: f for f in FAMILIES for kind in f.synth_kinds}
