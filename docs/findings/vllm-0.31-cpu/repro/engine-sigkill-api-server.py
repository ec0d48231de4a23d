#!/usr/bin/env python3
# Reproduces 'engine-sigkill-api-server': written by `lastcall repro`.
PARAMS = {'scenario': 'engine-sigkill-api-server', 'about': 'EngineCore/worker outlive a SIGKILLed API server (orphaned)', 'check': 'orphans', 'model': '/root/.cache/lastcall/models/tiny-llama-v1', 'argv': ['serve', '{model}', '--port', '{port}', '--host', '127.0.0.1', '--max-model-len', '2048', '--max-num-seqs', '4', '--enforce-eager', '--dtype', 'float32'], 'env': {}, 'launcher_env': {'HF_HUB_OFFLINE': '1', 'VLLM_CPU_KVCACHE_SPACE': '1', 'VLLM_NO_USAGE_STATS': '1', 'VLLM_DO_NOT_TRACK': '1'}, 'stream_s': 10.0, 'after_failure_s': 30.0, 'steps': [{'kind': 'engine_request', 'max_tokens': 8, 'stream': False}, {'kind': 'engine_signal', 'to': 'api_server', 'sig': 'SIGKILL'}, {'kind': 'wait_gone', 'timeout': 5.0}]}

import argparse, collections, http.client, json, os, re, select, shlex, shutil, signal, socket, stat, subprocess
import sys, tempfile, threading, time, urllib.request

ROLES = {"engine_core": "VLLM::EngineCor", "worker": "VLLM::Worker"}  # comm names vLLM and its stand-in set
READY = "Application startup complete"  # what `vllm serve` (and the stand-in) prints once it serves
# a line saying the start failed (vLLM's own words, the stand-in's ERROR: lines): the engine must then exit
FAILED = re.compile(r"^ERROR: |Address already in use|RuntimeError: Engine core initialization failed")
HELD = "Address already in use"  # how vLLM's ZMQError (and the stand-in) says a port it binds is held
# where the engine makes its files: a directory of the script's own, as the run's TMPDIR was the run's
PATH_VARS = ("TMPDIR", "VLLM_RPC_BASE_PATH")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hold(port):
    """A socket listening on 127.0.0.1:port (0: a free one), as another process holding the port would."""
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


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


class Output:
    """The engine's output, read to its end on a thread (a full pipe never blocks the engine): whether it printed
    its ready line, its first failure line and when, whether it named a held port, whether it ended."""

    def __init__(self, proc):
        self.cond = threading.Condition()
        self.ready = self.ended = self.held = False
        self.failure, self.failed_at = "", None
        self.tail = collections.deque(maxlen=20)
        threading.Thread(target=self.read, args=(proc,), daemon=True).start()

    def read(self, proc):
        for line in proc.stdout:
            with self.cond:
                self.tail.append(line.rstrip("\n"))
                self.ready = self.ready or READY in line
                self.held = self.held or HELD in line
                if self.failed_at is None and FAILED.search(line):
                    self.failure, self.failed_at = line.strip(), time.monotonic()
                self.cond.notify_all()
        with self.cond:
            self.ended = True
            self.cond.notify_all()


def accepting(port, limit):
    """Whether the port accepts a connection within ``limit`` seconds."""
    end = time.monotonic() + limit
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


def wait_ready(port, proc, out, limit):
    """The ready line seen, then the port accepting (the server prints the line just before it listens)."""
    end = time.monotonic() + limit
    with out.cond:
        out.cond.wait_for(lambda: out.ready or out.ended, limit)
    return out.ready and proc.poll() is None and accepting(port, end - time.monotonic())


def start_ends(proc, out, launch_s, after_s):
    """How the start ended: "ready", "exited", or "hung": neither within ``launch_s``, or still running
    ``after_s`` after it printed its failure (a failure line is no end: the engine must then exit)."""
    deadline = time.monotonic() + launch_s
    with out.cond:
        while not (out.ready or out.ended):
            if out.failed_at is not None:
                deadline = out.failed_at + min(after_s, launch_s)
            left = deadline - time.monotonic()
            if left <= 0:
                return "hung"
            out.cond.wait(left)
        if out.ready:
            return "ready"
    try:
        proc.wait(after_s)  # its output is closed: it is exiting
        return "exited"
    except subprocess.TimeoutExpired:
        return "hung"


def request(port, model, max_tokens):
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except OSError as exc:
        return str(exc)


def stream(port, model, step, started, resume):
    """A streaming completion; how it ended.  ``started`` is set at its first event, or for a reader that stalls
    (``stop_reading_after``) at the event it stops after, from where it reads on only once ``resume`` is set; a
    client that goes away (``disconnect_after``) closes its connection after that many events."""
    stall, leave = step.get("stop_reading_after"), step.get("disconnect_after")
    events, reason = 0, None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        if stall:  # a small receive window, set before the connect: the server's writes back up into its buffers
            conn.sock = socket.socket()
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, step["rcvbuf"])
            conn.sock.settimeout(600)
            conn.sock.connect(("127.0.0.1", port))
        body = json.dumps({"model": model, "prompt": "hello", "max_tokens": step["max_tokens"], "stream": True})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return f"refused (HTTP {r.status})"
        while line := r.readline():
            if not line.startswith(b"data:"):
                continue
            if line.strip() == b"data: [DONE]":
                return f"ended (finish_reason {reason}) after {events} events"
            events += 1
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                chunk = None
            chunk = chunk if isinstance(chunk, dict) else {}
            if "error" in chunk:
                return f"ended by an error event after {events} events: {str(chunk['error'])[:200]}"
            choices = chunk.get("choices") if isinstance(chunk.get("choices"), list) else []
            reason = next((c["finish_reason"] for c in choices if isinstance(c, dict) and c.get("finish_reason")),
                          reason)
            if events == (stall or leave or 1):
                started.set()
                if leave:
                    return f"disconnected after {events} events"
                if stall:
                    resume.wait()
        return f"cut: the connection closed after {events} events, before data: [DONE]"
    except (OSError, http.client.HTTPException) as exc:
        return f"cut ({exc})"
    finally:
        conn.close()
        started.set()


def in_background(how, ended, *args):
    """``stream(*args)`` on a thread of its own: how it ended appended to ``how``, then ``ended`` set."""
    try:
        how.append(stream(*args))
    finally:
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


def files_in(top):
    """Every file and socket file under ``top`` (its directories are not counted), each with its kind."""
    out = []
    for d, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            path = os.path.join(d, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:  # removed while the walk went on
                continue
            if not stat.S_ISDIR(mode):
                out.append(f"{'socket' if stat.S_ISSOCK(mode) else 'file'} {os.path.relpath(path, top)}")
    return out


def kill_all(proc, seen):
    """SIGKILL the engine's session (its process group) and every process of its tree seen (an orphan has left
    the tree, not the group), then wait for them: nothing outlives the script or writes into its directory."""
    members = set(seen) | set(tree(proc.pid))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for p in members:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    proc.wait()
    wait_gone(proc, members, 10)


def start_check(a, proc, out):
    """The finding is the start itself: it must become ready or exit, never hang."""
    how = start_ends(proc, out, a.launch_s, PARAMS["after_failure_s"] * a.time_scale)
    print("the start:", how, "| its failure line:", out.failure or "none", flush=True)
    if how == "exited" and not out.held:
        print("the engine exited without naming the held port; its last lines:", *out.tail, sep="\n")
        return 2
    if how == "hung":
        print("DEFECT: the start neither became ready nor exited (it hangs on the held port)")
        return 1
    print("the start became ready" if how == "ready" else f"the start failed and exited ({proc.returncode})")
    return 0


def play(a, proc, port, out, seen, workdir):
    """The run's steps, then the check of the finding; the exit status."""
    if PARAMS["check"] == "start_hangs":  # nothing after the start is played
        return start_check(a, proc, out)
    if not wait_ready(port, proc, out, a.launch_s):
        print("the engine did not become ready; its last lines:", *out.tail, sep="\n", flush=True)
        return 2
    seen.extend(tree(proc.pid))
    members = list(seen)
    print("ready:", [(p, comm(p)) for p in members], flush=True)
    resume = threading.Event()  # a stalled reader reads on once the waits are over, as the run's did
    streams = []  # (ended, how it ended) of each stream in the background, the ones in flight at the signal
    for step in PARAMS["steps"]:
        kind = step["kind"]
        if kind == "engine_request" and step.get("disconnect_after"):  # the run went on once it had gone away
            how = stream(port, a.model, step, threading.Event(), resume)
            print("stream whose client goes away:", how, flush=True)
        elif kind == "engine_request" and step["stream"]:
            started, ended, ends = threading.Event(), threading.Event(), []
            streams.append((ended, ends))
            threading.Thread(target=in_background, args=(ends, ended, port, a.model, step, started, resume),
                             daemon=True).start()
            # as the scenario waits for its first event (a stalled reader: for the stall)
            print("stream stalled:" if step.get("stop_reading_after") else "stream started:", started.wait(60),
                  flush=True)
        elif kind == "engine_request":
            print("request:", request(port, a.model, step["max_tokens"]), flush=True)
        elif kind == "engine_signal":
            members = tree(proc.pid)
            seen.extend(members)
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
            resume.set()
    if PARAMS["check"] == "orphans":
        defect = any(alive(p) for p in members)
        print("DEFECT: processes outlived the killed API server" if defect else "no process outlived it")
    elif PARAMS["check"] == "stream_hangs":
        resume.set()
        end = time.monotonic() + PARAMS["stream_s"] * a.time_scale
        hung = [i for i, (ended, _) in enumerate(streams) if not ended.wait(max(0, end - time.monotonic()))]
        for i, (_, ends) in enumerate(streams):
            print(f"stream {i + 1} in the background:", ends[0] if ends else "no end")
        defect = bool(hung)
        print("DEFECT: the stream in flight at the signal never ended" if defect else "the stream ended")
    elif PARAMS["check"] == "files_left":
        left = files_in(workdir)
        defect = bool(left)
        print(f"DEFECT: {len(left)} left in the engine's TMPDIR after its stop:" if defect
              else "nothing left in the engine's TMPDIR", *left, sep="\n")
    else:
        if proc.returncode is None:  # still running: its exit status says nothing yet, either way
            print("the API server has not exited: its exit status cannot be judged", flush=True)
            return 2
        defect = proc.returncode == 0
        print("DEFECT: the API server exited 0 although its engine died" if defect
              else f"the API server's exit status: {proc.returncode}")
    return 1 if defect else 0


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
    held = [hold(step["port"]) for step in PARAMS["steps"] if step["kind"] == "hold_port"]
    workdir = tempfile.mkdtemp(prefix="repro-")
    env = {k: str(held[0].getsockname()[1]) if v == "{held}" else v for k, v in PARAMS["env"].items()}
    env.update({k: workdir for k in PATH_VARS})
    # what lastcall's launcher gives every engine (a 1 GiB KV cache per CPU worker: vLLM's default takes most of
    # the memory for each, and two workers of TP=2 are then killed for it), unless this environment says otherwise
    env.update({k: v for k, v in PARAMS["launcher_env"].items() if k not in os.environ})
    tp = next((int(v) for k, v in zip(cmd, cmd[1:]) if k == "--tensor-parallel-size"), 1)
    if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        # vLLM's CPU workers bind their OpenMP threads one NUMA node each unless told otherwise, and a start
        # refuses a machine with fewer nodes than workers; the run's launcher gave each worker a core
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i % (os.cpu_count() or 1)) for i in range(tp))
    print("launching:", shlex.join(cmd), "with", env, flush=True)
    seen = []
    try:
        try:
            proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", env={**os.environ, **env})
        except OSError as exc:
            print("the engine did not start:", exc, flush=True)
            return 2
        try:
            return play(a, proc, port, Output(proc), seen, workdir)
        finally:
            kill_all(proc, seen)
    finally:
        for s in held:
            s.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
