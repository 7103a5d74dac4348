"""The synth kinds the shared fixture builders (irsurgeon.synth.registry) write, by name: no openvino here, so the
command line lists them while it starts."""
QWEN_KINDS = ("qwen35", "qwen35-moe", "llama")
