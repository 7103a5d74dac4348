"""ir: existing IRs, read only (imports core/ only): what an export directory holds (export), safe reading and the one atomic write (files), graph
queries (graph), weight storage (storage), hidden-state discovery (hidden_states), rt_info edits as text (xmlsafe)."""
