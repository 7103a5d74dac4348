"""DFlash: a block-diffusion drafter of a few Qwen3-style layers conditioned on the target's hidden states.

    model.py  config as transformers 5.2.0 / dflash 0.1.0 read it, tensor table, the stateful draft graph (BUILDER)
    rope.py   the RoPE variants its configs name (default, linear, yarn)

Not registered yet (families/registry.py): the family's stage (the draft's directory, the target's hidden-state
annotation), verify, genai runtime and synth come with its Family class; until then nothing in the house reaches it.
"""
