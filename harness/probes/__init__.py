"""Probes: snapshots of the machine by identity (paths, /dev/shm, sockets, processes, GPU).

``harness.probes.snapshot.take`` calls the others (``harness.launch.snapshots.for_cluster`` gives it a
cluster's selection); ``model`` holds the records.
Nothing is imported here, so importing one probe stays cheap.
"""
