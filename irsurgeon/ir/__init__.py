"""Existing IRs: find them in a target directory (files), query their graph (graph), edit rt_info as text (xmlsafe)."""
