"""Real engines as systems under test: their process trees, launched from a command line and judged from outside."""
