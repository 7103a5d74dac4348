"""The protocol every draft family implements: what the house's flows ask of a family, and nothing else.

A family is one package `irsurgeon/families/<name>/` whose `__init__.py` ends with `FAMILY = <its Family subclass>()`,
its line in families/registry.py, and its bundled pair fixtures/<key>/{target,ckpt}. The flows reach a family only
through the registry and this protocol; they never import a family's modules. A family's `__init__` imports nothing
heavy: each method imports its own modules on use, so `irsurgeon --help` starts without openvino. A subclass that
leaves a claim below unset is refused when it is defined (Family.__init_subclass__).

The claims (class attributes):
    key, title, describe  the name `show` prints and fixtures/<key>/ holds; a few words for help texts; one line
    model_types           config.json model_type values of the family's checkpoints: declared here, nowhere else
    layout                the files it writes into a target (names relative to it; one subfolder level allowed),
                          the draft IR and the target IR whose KV grows, for show / footprint / genai
    hub_prefix            the tensors a repo id's weights are fetched for: those named `prefix*`, "" for every tensor;
                          it must cover the prefix of the recipe's table, whose tensors the strict loader reads
    standalone            `build-mtp` writes its draft alone into an output directory
    synth_kinds           the seeded tiny fixtures `irsurgeon synth --kind ...` writes for it, each with a few words
                          (at least one; the first is the one guarantee tests synthesize)
    patch_options         the family-specific Options fields it reads (kv_cache_precision, hidden_layers); given to
                          a family that does not read it: refused
    runtime_overhead      MiB: peak RSS of a process running openvino-genai's plain and speculative pipelines on the
                          family's bundled pair (benchmarks/measure_overhead.py), the runtime overhead `show` adds to
                          a directory's footprint
The methods, in the order `patch` calls them:
    claims(config, held)  whether a checkpoint is this family's draft, by its config.json (an object) and what it
                          holds (weights.checkpoint.Held: tensor names and shapes, read on first use): default, the
                          config's model_type is one of model_types; the registry's for_config is the one caller
    reading(config, held, source)  the config as the family reads this checkpoint, with one line per key set aside
                          because what the checkpoint holds says otherwise (default: as it is)
    readings(config, held, target)  what this checkpoint leaves open for this target (Reading: alternative config
                          edits, the first what patch builds), which `tune` settles by acceptance (default: none)
    recognise(dir)        how surely a directory is this family's: DRAFT (its draft is there), TARGET, NONE
    inspect(dir)          the target as the family sees it: a Target (raises a one-line IRSurgeonError otherwise)
    recipe()              the build's view of its checkpoints (draft.recipe.Recipe)
    pair(target, staging) what proves the checkpoint belongs to the target, checked before any weight is read:
                          a Pairing, or an IRSurgeonError (with --allow-foreign-checkpoint the family says so)
    plan_steps(target, choice)  the "would ..." lines of --dry-run
    finish(model, staging)      compress, runtime options, provenance of the built draft; returns the model
    stage(tx, target, staging)  write the draft and every other new file into the transaction and check them
                          there; the house commits them all at once
    verify(dir, checkpoint, hub, echo)  the family's checks of a directory, as Check rows (never raises for a
                          failed check)
    genai()               how openvino-genai runs the directory (GenaiRuntime)
    run_hint(dir)         one line: how to run the patched directory
    synth(kind, ...)      write a seeded tiny fixture of one of its synth_kinds
inspect, recipe, finish, stage, verify and genai have defaults that delegate, by convention, to the family's own
modules (Family.part): target.inspect_target, model.RECIPE, patch.finish and patch.stage, verify.verify and
genai.RUNTIME; a family whose step needs more than the convention gives overrides it.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import IntEnum
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # types only: the protocol loads without openvino (the CLI imports every family's __init__)
    import openvino as ov

    from irsurgeon.draft.recipe import Recipe
    from irsurgeon.quant.precision import Choice
    from irsurgeon.weights.held import Held
    from irsurgeon.weights.hub import HubOptions

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
class Tuned:
    """What `irsurgeon tune` writes with a draft: its record (JSON, the draft's provenance rt_info irsurgeon/tuning)
    and the K chosen for the target's generation_config.json (None: that file is left as it is)."""
    record: str
    k: int | None = None


@dataclass
class Options:
    """How a patch was asked for (the CLI's options; the Python API's irsurgeon.Options)."""
    weight_format: str = "auto"
    kv_cache_precision: str | None = None  # None: the families that record one write f16 (Gemma 4's has no KV)
    force: bool = False
    dry_run: bool = False
    wait: bool = False
    allow_nonfinite: bool = False
    allow_foreign_checkpoint: bool = False
    hub: HubOptions | None = None  # revision, token, cache dir for a repo id
    hidden_layers: tuple[int, ...] | None = None  # the target layers a draft is fed from (families that take it)
    # keys set over the checkpoint's config.json before the family reads it: one alternative of each Reading (what
    # `tune` settles); staged as the draft's config.json where the family writes one, and recorded in its provenance
    config_edits: dict | None = None
    # what `tune` chose and measured, committed with the draft in one transaction (flows/tune.py Tuned)
    tuned: Tuned | None = None

    def kv_cache(self) -> str:
        """The KV cache precision a draft records: the one asked for, else f16."""
        return self.kv_cache_precision or "f16"


class Target:
    """What Family.inspect returns: the target directory as its family sees it. A family's own target class
    subclasses it and adds what its pair, plan_steps and stage read; the house reads only these two."""
    path: Path                     # the target directory
    warnings: tuple[str, ...] = ()  # what its files say that openvino-genai or transformers read otherwise


@dataclass
class Staging:
    """What a family's pair, finish and stage get from the house: the checkpoint and how the draft was asked for."""
    root: Path                 # the checkpoint directory (local, or the hub cache snapshot)
    source: str                # as the user spelled it (provenance, messages)
    cfg: object                # the family's parsed checkpoint config (its Recipe.parse_config's result)
    options: Options
    echo: Echo = print
    choice: Choice | None = None      # the weight format: set once planned (pair runs before)
    provenance: dict[str, str] = field(default_factory=dict)  # rt_info irsurgeon/... for the draft
    model: ov.Model | None = None     # the built draft (strict accounting done), for stage: take() it
    read_as: dict | None = None  # the config as the family read it (Family.reading), when that differs from the file

    def config_file(self) -> bytes:
        """The checkpoint's config.json for a draft folder: as it is, or as the family read it (read_as), so that
        verify's pair check reads what was built."""
        from irsurgeon.weights.checkpoint import config_bytes

        if self.read_as is None:
            return config_bytes(self.root)
        return (json.dumps(self.read_as, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    def take(self) -> ov.Model:
        """The model, handed over: once the draft is saved its weights can be freed before the staged copy runs."""
        model, self.model = self.model, None
        return model


@dataclass(frozen=True)
class Reading:
    """One thing a checkpoint does not state, and the ways it can be read: each alternative a label and the config
    edits (keys set over its config.json, Options.config_edits) that build it; the first alternative is what
    `patch` builds by default and sets nothing."""
    name: str                                     # what is open, a few words ("taps", "RoPE base")
    why: str                                      # one line: why the checkpoint leaves it open
    alternatives: tuple[tuple[str, dict], ...]    # (label, edits); alternatives[0][1] == {}


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
    drafted: Callable[[object], int] = num_draft_tokens  # (extended perf metrics) -> tokens the draft proposed

    def prompt(self, text: str) -> str | list[str]:
        return [text] if self.as_batch else text


CLAIMS = ("key", "title", "describe", "layout", "model_types", "synth_kinds", "runtime_overhead")


class Family(ABC):
    key: str
    title: str
    describe: str
    layout: Layout
    model_types: tuple[str, ...]
    hub_prefix: str = ""
    standalone: bool = False
    synth_kinds: dict[str, str] = {}  # kind -> a few words for `synth --help`
    patch_options: frozenset[str] = frozenset()  # the family-specific Options fields it reads (others: refused)

    def __init_subclass__(cls, **kwargs):
        """A family class states its claims where it is defined (as llama.cpp's converter registers an arch on the
        class): one missing or empty is a TypeError at import, not a family the house half knows."""
        super().__init_subclass__(**kwargs)
        missing = [name for name in CLAIMS if not getattr(cls, name, None)]
        if missing:
            raise TypeError(f"family {cls.__name__} does not state {', '.join(missing)}")

    def claims(self, config: dict, held: Held | None = None) -> bool:
        return config.get("model_type") in self.model_types

    def reading(self, config: dict, held: Held | None, source: str) -> tuple[dict, list[str]]:
        return config, []

    def readings(self, config: dict, held: Held | None, target: Target) -> list[Reading]:
        """What this checkpoint (its config as `reading` gives it) leaves open for `target`: none by default."""
        return []

    def claimed(self) -> str:
        """What `claims` takes, in words for a refusal (a family claiming by more than the model_type says so)."""
        return f"model_type {' / '.join(self.model_types)}"

    @abstractmethod
    def recognise(self, directory: Path) -> Match:
        ...

    def part(self, name: str):
        """The family's module `name`, imported on use (openvino and the family's graph code load only when needed).
        By convention every family's folder holds model.py (RECIPE), target.py (inspect_target), patch.py (finish,
        stage), verify.py (verify) and genai.py (RUNTIME): the defaults below delegate to them, and a family
        overrides only what differs."""
        return import_module(f"{type(self).__module__}.{name}")

    def inspect(self, directory: Path) -> Target:
        return self.part("target").inspect_target(Path(directory))

    def recipe(self) -> Recipe:
        """draft.recipe.Recipe of the family's checkpoints."""
        return self.part("model").RECIPE

    @abstractmethod
    def pair(self, target: Target, staging: Staging) -> Pairing:
        ...

    @abstractmethod
    def plan_steps(self, target: Target, choice: Choice) -> list[str]:
        ...

    def finish(self, model: ov.Model, staging: Staging) -> ov.Model:
        """The built draft made ready to save (compressed, runtime options, provenance); returns the model."""
        return self.part("patch").finish(model, staging)

    def stage(self, tx, target: Target, staging: Staging) -> None:
        """tx: the commit.transaction.DirectoryTransaction of the target."""
        self.part("patch").stage(tx, target, staging)

    def verify(self, directory: Path, checkpoint=None, hub: HubOptions | None = None,
               echo: Echo = print) -> list[Check]:
        return self.part("verify").verify(Path(directory), checkpoint, hub, echo)

    def stale(self, directory: Path, options: Options) -> str | None:
        """Why a draft that passes verify is still not the one `options` ask for (a family-specific option given
        explicitly, as an explicit weight format is for every family), in words for the rebuild's line; None: it
        is. Default: nothing family-specific to compare."""
        return None

    def genai(self) -> GenaiRuntime:
        return self.part("genai").RUNTIME

    @abstractmethod
    def run_hint(self, directory: Path) -> str:
        ...

    @abstractmethod
    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """Write the seeded fixture `kind` under out_dir; returns its parts by name ({"target": ..., "ckpt": ...}).
        options["force"]: replace an earlier output there (irsurgeon.synth.output)."""

    def __repr__(self) -> str:
        return f"<family {self.key}>"


def refuse_sizing(kind: str, options: dict) -> None:
    """For a synth kind that writes one fixed pair: any size, layer pattern, --with-mtp or non-default
    --weight-format given is one ConfigError line naming them."""
    from irsurgeon.core.errors import ConfigError, with_hint

    given = [k.replace('_', ' ') for k in (options.get("sizes") or {})]
    given += [k.replace('_', ' ') for k in ("layer_types", "with_mtp") if options.get(k) is not None]
    given += ["weight format"] if options.get("weight_format", "f32") != "f32" else []
    if given:
        flags = ", ".join(f"--{g.replace(' ', '-')}" for g in given)
        what = f"the {given[0]} option does not" if len(given) == 1 else f"the {', '.join(given)} options do not"
        raise with_hint(ConfigError(f"kind {kind} writes one fixed tiny pair: {what} apply (it takes only a seed, "
                                    f"wait and force)"), "--seed", f"{flags}: not for this kind")
