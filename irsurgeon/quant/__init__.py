"""quant: weight formats as data, the format choice (auto), nncf compression in bounded memory. Imports core/ and ir/."""
