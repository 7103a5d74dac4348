"""commit: every write into a target: the staged transaction, its journal, recovering a killed run, the annotation's in-place write. Imports core/ and ir/."""
