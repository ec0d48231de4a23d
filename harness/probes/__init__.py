"""Probes: snapshots of the machine by identity (paths, /dev/shm, sockets, processes, GPU).

``harness.probes.snapshot.take`` / ``for_cluster`` call the others; ``model`` holds the records.
Nothing is imported here, so importing one probe stays cheap.
"""
