"""Fault kinds: client-side (the harness is the misbehaving peer), failpoints, environment."""
