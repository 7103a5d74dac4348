"""Draft-model families other than the Qwen3.5 MTP head, one package each."""
