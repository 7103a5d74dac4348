"""core: errors, limits, config readers, rt_info keys, terminal text, signals, calls at held directories, work beside the main thread. Imports nothing of irsurgeon outside core/."""
