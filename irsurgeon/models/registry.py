"""model_type -> draft-model family. Adding a family: a module under irsurgeon.models with its `FAMILY`, and one line
in FAMILIES."""
from __future__ import annotations

from irsurgeon.errors import ConfigError
from irsurgeon.models import gemma4_assistant, qwen35_mtp
from irsurgeon.models.family import Family

FAMILIES: tuple[Family, ...] = (
    qwen35_mtp.FAMILY,
    gemma4_assistant.FAMILY,
)


def family_for(model_type: object, source: str) -> Family:
    """The family that reads a config.json of this top-level model_type, or a ConfigError listing the known ones."""
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise ConfigError(f"{source}: model_type {model_type!r} has no supported MTP head (expected one of {known})")
