"""Real processes: the fork server, the engine and worker mains, the launcher and its control channel."""
