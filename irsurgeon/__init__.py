"""irsurgeon: graph surgery on OpenVINO IR.

Public API (openvino is imported on first use, so `import irsurgeon` and the CLI start fast):
    build_mtp_model, save_mtp_model   the Qwen3.5 MTP head from safetensors, and writing it
    patch, Options                    make an exported directory MTP-ready in place
    annotate_ir, show                 hidden-state annotation; what an IR or directory holds
    load_config, MTPConfig            the head's configuration from config.json
    IRSurgeonError                    the base of every error irsurgeon raises on purpose
"""
from importlib import import_module

__version__ = "0.1.0"

from irsurgeon.errors import IRSurgeonError  # noqa: E402,F401

_LAZY = {
    "build_mtp_model": "irsurgeon.build", "save_mtp_model": "irsurgeon.build",
    "patch": "irsurgeon.patch", "Options": "irsurgeon.patch",
    "annotate_ir": "irsurgeon.annotate", "show": "irsurgeon.show",
    "load_config": "irsurgeon.config", "MTPConfig": "irsurgeon.config",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'irsurgeon' has no attribute {name!r}")


__all__ = ["IRSurgeonError", *_LAZY]
