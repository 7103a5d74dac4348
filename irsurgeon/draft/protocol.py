"""The protocol every draft family implements: what the house's flows ask of a family, and nothing else.

A family is one package `irsurgeon/families/<name>/` whose `__init__.py` ends with `FAMILY = <its Family subclass>()`,
and one line in families/registry.py. The flows (irsurgeon.flows.patch, verify, show, genai_check, footprint, the CLI)
reach a family only through the registry and this protocol; they never import a family's modules. A family's
`__init__` imports nothing heavy: each method imports its own modules on use, so `irsurgeon --help` starts without
openvino.

    key, describe         the name `show` prints ("qwen3_5", "gemma4"), and one line for messages
    layout                the files it writes into a target (names relative to it; one subfolder level allowed),
                          the draft IR and the target IR whose KV grows, for show / footprint / genai
    hub_prefix            the tensors a repo id's weights are fetched for (by byte range, from whatever shard
                          holds them): those named `prefix*`, "" for every tensor; it must cover the prefix of the
                          builder's table, whose tensors the strict loader reads
    builder()             the build's view of its checkpoints (draft.recipe.Builder)
    recognise(dir)        how surely a directory is this family's: DRAFT (its draft is there), TARGET (a target of
                          its kind, not patched), NONE
    claims(config)        whether a checkpoint's config.json (an object) is this family's draft
    inspect(dir)          the target as the family sees it (raises a one-line IRSurgeonError naming the problem)
    pair(target, cfg, ctx)  what proves the checkpoint belongs to the target, checked before any weight is read:
                          a Pairing (its proof for the draft's provenance, what could not be proven offline), or
                          an IRSurgeonError (refused; with --allow-foreign-checkpoint the house says so and goes on)
    plan_steps(target, choice)  the "would ..." lines of --dry-run
    finish(model, staging)    compress, runtime options, provenance of the built draft
    stage(tx, target, staging)  write the draft and every other new file into the transaction and check them
                          there; the house commits them all at once
    verify(dir, checkpoint, hub, echo)  the family's checks of a directory, as Check rows (never raises for a
                          failed check)
    genai()               how openvino-genai runs the directory (GenaiRuntime)
    run_hint(dir)         one line: how to run the patched directory
    synth_kinds, synth()  the seeded tiny fixtures the family can write (`irsurgeon synth --kind ...`)
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable

Echo = Callable[[str], None]


class Match(IntEnum):
    """How surely a directory belongs to a family (the registry takes the highest; ties go to registry order)."""
    NONE = 0
    TARGET = 1  # a target of the family's kind, no draft of it yet
    DRAFT = 2   # the family's draft files are there


@dataclass
class Check:
    """One line of `verify`: a named check, whether it passed, and what was seen."""
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Layout:
    """The files a family writes into a target directory, by name relative to it."""
    writes: tuple[str, ...]  # every name a patch of this family may move into the target
    draft_xml: str           # the draft IR (show lists it, footprint counts it as the draft's)
    target_xml: str          # the target IR whose KV cache grows (footprint, genai scheduler sizing)
    target_alternatives: tuple[str, ...] = ()  # other target IRs the family patches (another export layout)

    def target_in(self, directory: Path) -> str:
        """The target IR of this directory: target_xml, else the first alternative present, else target_xml."""
        for name in (self.target_xml, *self.target_alternatives):
            if (Path(directory) / name).is_file():
                return name
        return self.target_xml

    @property
    def subfolders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.split("/", 1)[0] for n in self.writes if "/" in n))


@dataclass
class Pairing:
    """What the pair check established: `identity` is recorded in the draft's provenance; `unproven` says what
    could not be checked offline (the house prints it and verify --genai measures it)."""
    identity: str = ""
    unproven: str = ""


@dataclass
class Staging:
    """What a family's stage() gets from the house: the built draft and everything about how it was asked for."""
    model: Any                 # the built ov.Model (strict accounting done); take() it: the house keeps no reference
    root: Path                 # the checkpoint directory (local, or the hub cache snapshot)
    source: str                # as the user spelled it (provenance, messages)
    cfg: Any                   # the family's parsed checkpoint config
    choice: Any                # precision.Choice: the weight format
    options: Any               # patch.Options
    echo: Echo = print
    provenance: dict = field(default_factory=dict)  # rt_info irsurgeon/... for the draft

    def take(self):
        """The model, handed over: once the draft is saved its weights can be freed before the staged copy runs."""
        model, self.model = self.model, None
        return model


def num_draft_tokens(ext_metrics) -> int:
    """The drafted-token count of genai's extended metrics, as its classic and MTP paths report it."""
    return ext_metrics.get_num_draft_tokens()


@dataclass(frozen=True)
class GenaiRuntime:
    """How openvino-genai runs a family's directory, for `verify --genai`."""
    # (genai module, directory, device, properties, draft: bool, max_assistant_tokens: int = 0) -> pipeline; the
    # draft pipeline is sized for drafts of up to max_assistant_tokens tokens (0: the family's default)
    pipeline: Callable
    equivalence_properties: Callable[[Path], dict]
    honours_eos: bool = False  # the equivalence runs honour EOS in both pipelines (the draft path stops there)
    as_batch: bool = False     # generate(str) returns only text: a one-prompt list gets the metrics
    drafted: Callable[[Any], int] = num_draft_tokens  # (extended perf metrics) -> tokens the draft proposed

    def prompt(self, text: str) -> str | list[str]:
        return [text] if self.as_batch else text


class Family(ABC):
    key: str
    describe: str
    layout: Layout
    hub_prefix: str = ""
    standalone: bool = False  # `build-mtp` writes its draft alone into an output directory
    synth_kinds: tuple[str, ...] = ()

    @abstractmethod
    def builder(self):
        """draft.recipe.Builder of the family's checkpoints."""

    @abstractmethod
    def recognise(self, directory: Path) -> Match:
        ...

    def claims(self, config: dict) -> bool:
        return config.get("model_type") in self.builder_types()

    @abstractmethod
    def builder_types(self) -> tuple[str, ...]:
        """config.json model_type values of the family's checkpoints (known without importing openvino)."""

    @abstractmethod
    def inspect(self, directory: Path):
        ...

    @abstractmethod
    def pair(self, target, cfg, root: Path, source: str, options, echo: Echo) -> Pairing:
        ...

    @abstractmethod
    def plan_steps(self, target, choice) -> list[str]:
        ...

    @abstractmethod
    def finish(self, model, staging: Staging):
        """The built draft made ready to save (compressed, runtime options, provenance); returns the model."""

    @abstractmethod
    def stage(self, tx, target, staging: Staging) -> None:
        ...

    @abstractmethod
    def verify(self, directory: Path, checkpoint=None, hub=None, echo: Echo = print) -> list[Check]:
        ...

    @abstractmethod
    def genai(self) -> GenaiRuntime:
        ...

    @abstractmethod
    def run_hint(self, directory: Path) -> str:
        ...

    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """Write the seeded fixture `kind` under out_dir; returns its parts by name ({"target": ..., ...}).
        options["force"]: replace an earlier output there (irsurgeon.synth.output)."""
        raise NotImplementedError(f"{self.key} has no synth kinds")

    def __repr__(self) -> str:
        return f"<family {self.key}>"


def refuse_sizing(kind: str, options: dict) -> None:
    """For a synth kind that writes one fixed pair: any size, layer pattern, --with-mtp or non-default
    --weight-format given is one ConfigError line naming them."""
    from irsurgeon.core.errors import ConfigError

    given = [f"--{k.replace('_', '-')}" for k in (options.get("sizes") or {})]
    given += [f"--{k.replace('_', '-')}" for k in ("layer_types", "with_mtp") if options.get(k) is not None]
    given += ["--weight-format"] if options.get("weight_format", "f32") != "f32" else []
    if given:
        raise ConfigError(f"--kind {kind} writes one fixed tiny pair: {', '.join(given)} do not apply (it takes "
                          f"--seed, --wait and --force)")
