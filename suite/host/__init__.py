"""Layer 2, the host: hook specifications, the plugin manager, the machine's facts, and planning a run."""
