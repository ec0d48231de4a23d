#!/usr/bin/env python3
# Reproduces 'engine-shutdown-timeout-0': written by `lastcall repro`.
PARAMS = {'scenario': 'engine-shutdown-timeout-0', 'about': 'a stream in flight at SIGTERM (--shutdown-timeout 0) never ends', 'check': 'stream_hangs', 'model': '/root/.cache/lastcall/models/tiny-llama-v1', 'argv': ['serve', '{model}', '--port', '{port}', '--host', '127.0.0.1', '--max-model-len', '2048', '--max-num-seqs', '4', '--enforce-eager', '--dtype', 'float32', '--shutdown-timeout', '0'], 'stream_s': 10.0, 'steps': [{'kind': 'engine_request', 'max_tokens': 2000, 'stream': True}, {'kind': 'engine_signal', 'to': 'api_server', 'sig': 'SIGTERM'}, {'kind': 'wait_gone', 'timeout': 10.0}]}

import argparse, http.client, json, os, select, shlex, signal, socket, subprocess, sys, threading, time, urllib.request

ROLES = {"engine_core": "VLLM::EngineCor", "worker": "VLLM::Worker"}  # comm names vLLM and its stand-in set
READY = "Application startup complete"  # what `vllm serve` (and the stand-in) prints once it serves


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid):
    out = []
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def tree(root):
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children(p)
    return seen


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def watch_output(proc):
    """An Event set when the engine prints its ready line (or its output ends); the output is read to its end,
    so a full pipe never blocks the engine."""
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            if READY in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    return ready


def wait_ready(port, proc, ready, limit):
    """The ready line seen, then the port accepting (the server prints the line just before it listens)."""
    end = time.monotonic() + limit
    if not ready.wait(limit) or proc.poll() is not None:
        return False
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=max(0.01, end - time.monotonic())):
                return True
        except ConnectionRefusedError:
            if time.monotonic() >= end:
                return False
            os.sched_yield()
        except OSError:
            return False


def request(port, model, max_tokens):
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except OSError as exc:
        return str(exc)


def stream(port, model, max_tokens, started, ended):
    """A streaming completion: ``started`` at its first event, ``ended`` when it ends in any way."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        body = json.dumps({"model": model, "prompt": "hello", "max_tokens": max_tokens, "stream": True})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        while r.readline():
            started.set()
    except OSError:
        pass
    finally:
        started.set()
        ended.set()


def wait_gone(proc, members, limit):
    """Whether every process of ``members`` has exited within ``limit`` seconds (each watched by a pidfd)."""
    fds = []
    for pid in members:
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:  # gone already
            pass
    end = time.monotonic() + limit
    try:
        while fds and (left := end - time.monotonic()) > 0:
            for fd in select.select(fds, [], [], left)[0]:
                os.close(fd)
                fds.remove(fd)
    finally:
        for fd in fds:
            os.close(fd)
    proc.poll()
    return not any(alive(p) for p in members)


def main():
    ap = argparse.ArgumentParser(description=PARAMS["about"])
    ap.add_argument("--engine-cmd", default="vllm", help="the engine's command (default: vllm)")
    ap.add_argument("--model", default=PARAMS["model"])
    ap.add_argument("--engine-arg", action="append", default=[], help="one more argument for the engine")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every wait by this")
    ap.add_argument("--launch-s", type=float, default=600.0, help="seconds the start may take")
    a = ap.parse_args()
    port = free_port()
    argv = [a.model if x == "{model}" else str(port) if x == "{port}" else x for x in PARAMS["argv"]]
    cmd = shlex.split(a.engine_cmd) + argv + a.engine_arg
    print("launching:", shlex.join(cmd), flush=True)
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    ready = watch_output(proc)
    members = []
    started, ended = threading.Event(), threading.Event()  # the stream's, if the run has one
    try:
        if not wait_ready(port, proc, ready, a.launch_s):
            print("the engine did not become ready", flush=True)
            return 2
        members = tree(proc.pid)
        print("ready:", [(p, comm(p)) for p in members], flush=True)
        for step in PARAMS["steps"]:
            kind = step["kind"]
            if kind == "engine_request" and step["stream"]:
                threading.Thread(target=stream, args=(port, a.model, step["max_tokens"], started, ended),
                                 daemon=True).start()
                print("stream started:", started.wait(60), flush=True)  # as the scenario waits for its first event
            elif kind == "engine_request":
                print("request:", request(port, a.model, step["max_tokens"]), flush=True)
            elif kind == "engine_signal":
                members = tree(proc.pid)
                role = step["to"]
                pids = [proc.pid] if role == "api_server" else [p for p in members if comm(p).startswith(ROLES[role])]
                if not pids:
                    print("no process of role", role, flush=True)
                    return 2
                print("sending", step["sig"], "to", role, pids[0], flush=True)
                os.kill(pids[0], getattr(signal, step["sig"]))
            elif kind == "wait_gone":
                gone = wait_gone(proc, members, step["timeout"] * a.time_scale)
                left = [(p, comm(p)) for p in members if alive(p)]
                print("gone:", gone, "left:", left, "api server exit:", proc.returncode, flush=True)
        if PARAMS["check"] == "orphans":
            defect = any(alive(p) for p in members)
            print("DEFECT: processes outlived the killed API server" if defect else "no process outlived it")
        elif PARAMS["check"] == "stream_hangs":
            defect = not ended.wait(PARAMS["stream_s"] * a.time_scale)
            print("DEFECT: the stream in flight at the signal never ended" if defect else "the stream ended")
        else:
            defect = proc.returncode == 0
            print("DEFECT: the API server exited 0 although its engine died" if defect
                  else f"the API server's exit status: {proc.returncode}")
        return 1 if defect else 0
    finally:
        for p in [proc.pid, *members]:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
