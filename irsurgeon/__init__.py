"""irsurgeon: graph surgery on OpenVINO IR.

Public API: build the Qwen3.5 MTP head from safetensors, and the errors it raises.
"""
__version__ = "0.1.0"

from irsurgeon.errors import IRSurgeonError  # noqa: E402,F401
from irsurgeon.config import MTPConfig, load_config  # noqa: E402,F401
from irsurgeon.build import build_mtp_model, save_mtp_model  # noqa: E402,F401
