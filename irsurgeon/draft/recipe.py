"""What a draft family gives the build: how to read its config, its tensor table, its inputs and its graph.

Each family's model module (irsurgeon.families.<name>.model) ends with a `RECIPE = Recipe(...)` line; its family
(draft.protocol.Family.recipe) hands it to the build. The build (irsurgeon.draft.build) reads the config with
`parse_config`, loads the tensors of `tensors(cfg)` by role (irsurgeon.weights.spec), makes the inputs with
`parameters(cfg)`, calls `graph(inputs, w, cfg, **options)` where `w(name)` turns the tensor named
`table.prefix + role` into a weight constant, and refuses a table row the graph never asked for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import openvino as ov

from irsurgeon.weights.table import Table

Weights = Callable[[str], ov.Output]  # full checkpoint name (table prefix + role) -> weight output


@dataclass(frozen=True)
class Recipe:
    name: str  # the ov.Model's name
    parse_config: Callable[[dict, str], Any]  # (config.json object, its path for messages) -> config
    tensors: Callable[[Any], Table]
    parameters: Callable[[Any], tuple[list[ov.Node], Any]]  # config -> (Parameter nodes, what `graph` takes)
    graph: Callable[..., tuple[dict[str, ov.Output], list[ov.Node]]]  # -> (outputs by tensor name, sinks)
    rt_info: dict[str, str] = field(default_factory=dict)  # model-level rt_info every head of the family carries
