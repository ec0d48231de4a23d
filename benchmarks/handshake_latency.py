"""Shutdown latency of the reference handshake listener (idle, and under a peer handshaking back to back),
and the time to a typed error when its port is held; vLLM 0.33's behaviour as the poll_timeout_1s variant.

    .venv/bin/python benchmarks/handshake_latency.py [--reps 15] [--write]

Medians over fresh listeners, in-process, loopback only.  Targets: shutdown < 5 ms median idle
and under load; PortInUse < 100 ms.  ``--write`` commits the result: docs/data/handshake_latency.json and its
table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from collections.abc import Mapping

import docpage

from harness.errors import PortInUse
from harness.reference.handshake import AgentMetadata, fetch_metadata
from harness.reference.handshake_variants import get_handshake_variant

META = {(0, 0): AgentMetadata(engine_id="bench", agent_name="a", pp_rank=0, tp_rank=0, payload=b"x" * 64)}


def shutdown_ms(variant: str, loaded: bool) -> float:
    listener = get_handshake_variant(variant)(META, host="127.0.0.1", port=0)
    port = listener.start()
    stop = threading.Event()
    served = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                fetch_metadata("127.0.0.1", port, 0, 0, timeout=1.0)
                served.set()
            except Exception:
                return

    t = threading.Thread(target=hammer, daemon=True)
    if loaded:
        t.start()
        served.wait(5)
    t0 = time.perf_counter()
    ok = listener.shutdown()
    took = (time.perf_counter() - t0) * 1e3
    stop.set()
    if loaded:
        t.join(5)
    if not ok:
        return float("inf")
    return took


def port_held_ms() -> float:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    listener = get_handshake_variant("reference")(META, host="127.0.0.1", port=port)
    t0 = time.perf_counter()
    try:
        listener.start()
        raise SystemExit("start succeeded on a held port")
    except PortInUse:
        took = (time.perf_counter() - t0) * 1e3
    finally:
        holder.close()
        listener.shutdown()
    return took


# The docs table's words for a row's measure and variant.
MEASURES = {"shutdown, idle": "shutdown, idle",
            "shutdown, peer handshaking": "shutdown, a peer handshaking back to back",
            "start on a held port -> PortInUse": "start on a held port -> `PortInUse`"}
VARIANTS = {"poll_timeout_1s": "poll_timeout_1s (vLLM 0.11.1+)"}


def table(result: Mapping[str, object]) -> str:
    """The docs table of a result (:func:`main`'s JSON)."""
    rows = result["rows"]
    assert isinstance(rows, list)
    out = ["| measure | variant | median ms | min | max | n |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {MEASURES[r['measure']]} | {VARIANTS.get(r['variant'], r['variant'])} | {r['median_ms']:.2f} | "
                   f"{r['min_ms']:.2f} | {r['max_ms']:.2f} | {r['n']} |")
    return "\n".join([*out, "", docpage.provenance(result)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--write", action="store_true", help="commit the result to docs/ (data and table)")
    a = ap.parse_args()
    rows = []
    for variant, reps in (("reference", a.reps), ("poll_timeout_1s", 3)):
        for loaded in (False, True):
            if variant != "reference" and loaded:
                continue  # under load it never stops: the join times out (tested in tests/)
            xs = [shutdown_ms(variant, loaded) for _ in range(reps)]
            rows.append((f"shutdown, {'peer handshaking' if loaded else 'idle'}", variant, statistics.median(xs),
                         min(xs), max(xs), reps))
    xs = [port_held_ms() for _ in range(a.reps)]
    rows.append(("start on a held port -> PortInUse", "reference", statistics.median(xs), min(xs), max(xs), a.reps))
    print(f"{'measure':36} {'variant':16} {'median ms':>10} {'min':>8} {'max':>8} {'n':>4}")
    for r in rows:
        print(f"{r[0]:36} {r[1]:16} {r[2]:10.2f} {r[3]:8.2f} {r[4]:8.2f} {r[5]:4}")
    if a.write:
        measured = [{"measure": r[0], "variant": r[1], "median_ms": r[2], "min_ms": r[3], "max_ms": r[4], "n": r[5]}
                    for r in rows]
        result: dict[str, object] = {**docpage.measured(__file__, sys.argv[1:]), "rows": measured}
        docpage.write("handshake-latency", result, table(result))


if __name__ == "__main__":
    main()
