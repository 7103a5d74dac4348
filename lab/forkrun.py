"""`python -c CODE ARGS` runs for the tests at a fraction of their CPU: a fork server.

Most of what a short CLI run costs is importing: openvino, numpy, click, irsurgeon's own modules and what
huggingface_hub depends on take about 0.25 s of CPU of the 0.35-0.6 s a refused or small command uses; a forked run
of a refusal costs about 0.05 s. The hostile-input, hub and kill labs run hundreds of such commands. A `Server` (one
per test process, started on first use) imports those modules once and forks a fresh child for every run. The
child is a real, separate process, as a subprocess is:
- its own process group (a timeout kills it with whatever it started);
- the run's environment, working directory, argv, stdin (/dev/null) and its own stdout/stderr files at fds 0-2;
- it runs CODE as `python -c` would, as `__main__`, and ends as an interpreter ends (atexit handlers, flushed
  streams, the exit code of SystemExit, death by a signal).

What a fork shares with the server is only the imported modules, never a call's state: the server runs nothing but
imports. The modules preloaded are those that read no setting a test varies when they are imported; they are then
kept out of the garbage collector's way (gc.freeze), as long-lived as a fresh process's imports. `PRELOAD` leaves out
huggingface_hub (it reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE when imported, and the hub tests vary them),
openvino_genai and nncf (threads of their own) and irsurgeon.entry (importing it takes Ctrl-C, as the command's
first instruction); the server refuses to start if a preloaded module pulled one in or changed a signal's handler.
Tests that observe a process's start (import-time side effects, the entry points' first instructions, signals at
audit events) or run under strace keep starting fresh interpreters. tests/test_forkrun.py runs the same commands
both ways and compares what a caller sees.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELOAD = ("numpy", "openvino", "click", "irsurgeon.cli", "irsurgeon.cli.patch",
           "irsurgeon.cli.show", "irsurgeon.cli.verify", "irsurgeon.cli.build_mtp", "irsurgeon.cli.annotate",
           "irsurgeon.cli.synth", "irsurgeon.cli.tune", "irsurgeon.flows.patch", "irsurgeon.flows.show",
           "irsurgeon.flows.verify", "irsurgeon.flows.annotate", "irsurgeon.flows.standalone", "irsurgeon.weights.hub",
           "irsurgeon.weights.hub.fetch", "irsurgeon.weights.hub.partial", "irsurgeon.weights.hub.store")
# what huggingface_hub imports (it is two thirds of its import), where the installed version has it
PRELOAD_IF_PRESENT = ("httpx2", "httpcore2", "httpx", "httpcore", "requests", "anyio", "h11", "yaml", "filelock",
                      "tqdm", "certifi", "idna", "sniffio", "truststore", "attr", "sortedcontainers", "outcome", "trio",
                      "asyncio", "decimal", "mimetypes", "email.parser", "http.client", "urllib.request")
NOT_PRELOADED = ("huggingface_hub", "openvino_genai", "nncf", "irsurgeon.entry")

# Every server first imports: argv[1..3] are PRELOAD, PRELOAD_IF_PRESENT and NOT_PRELOADED as JSON.
PRELUDE = r'''
import json, os, select, signal, sys, time
_handlers = {_s: signal.getsignal(_s) for _s in signal.valid_signals() if _s not in (signal.SIGKILL, signal.SIGSTOP)}
for _name in json.loads(sys.argv[1]):
    __import__(_name)
for _name in json.loads(sys.argv[2]):
    try:
        __import__(_name)
    except ImportError:  # not a dependency of the installed huggingface_hub
        continue
_pulled = [_n for _n in json.loads(sys.argv[3]) if _n in sys.modules]
if _pulled:
    raise SystemExit(f"forkrun: a preloaded module imported {_pulled}")
if any(signal.getsignal(_s) != _h for _s, _h in _handlers.items()):
    raise SystemExit("forkrun: a preloaded module changed a signal's handler")
import gc
gc.freeze()  # what the imports made is kept for good, as in a fresh process: no child's collection walks it

def _become(req, fds):
    # in the child: the run's directory, environment, argv, and fds as its stdin, stdout and stderr
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for fd, opened in enumerate(fds):
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv[:] = req["argv"]
'''

# Runs the child's code once it has become the run (the loops return its request in the child alone).
EPILOGUE = r'''
_main = {"__name__": "__main__", "__builtins__": __builtins__}
exec(compile(_req["code"], "<string>", "exec"), _main)
'''

# The test's server: requests on fd argv[4], one JSON line each; answers on fd argv[5]. A request is {"code",
# "argv", "env", "cwd", "stdin", "stdout", "stderr" (paths), "timeout"}; the answer {"pid", "status" (an exit code,
# -N for signal N, null when the timeout killed it), "seconds", "cpu" (the child's user + system seconds, its own
# waited-for children included), "peak" (its peak resident set in bytes, wait4's ru_maxrss: a forked child starts
# from the server's high-water mark, the imports every run makes), "hwm" (VmHWM in bytes seen just before a
# timeout's kill, else 0)}. One run at a time: the test waits for it.
PIPE_LOOP = r'''
def _hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return int(next(ln for ln in status if ln.startswith("VmHWM")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0

def _serve():
    requests, answers = os.fdopen(int(sys.argv[4]), "r"), int(sys.argv[5])
    for line in requests:
        req = json.loads(line)
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            os.close(answers)
            requests.close()
            _become(req, [os.open(req["stdin"], os.O_RDONLY), os.open(req["stdout"], os.O_WRONLY | os.O_TRUNC),
                          os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC)])
            return req
        try:
            os.setpgid(pid, pid)
        except (ProcessLookupError, PermissionError):
            pass  # the child set it itself already, or has ended
        pidfd, status, seen = os.pidfd_open(pid), None, 0
        if not select.select([pidfd], [], [], req["timeout"])[0]:
            seen = _hwm(pid)
            os.killpg(pid, signal.SIGKILL)
            _, wstatus, usage = os.wait4(pid, 0)
        else:
            _, wstatus, usage = os.wait4(pid, 0)
            status = os.waitstatus_to_exitcode(wstatus)
        os.close(pidfd)
        os.write(answers, (json.dumps({"pid": pid, "status": status, "seconds": time.perf_counter() - start,
                                       "cpu": usage.ru_utime + usage.ru_stime, "peak": usage.ru_maxrss * 1024,
                                       "hwm": seen}) + "\n").encode())
    raise SystemExit(0)

_req = _serve()
'''

# A shell's server: listens on the AF_UNIX SOCK_SEQPACKET socket argv[4]. A client (SHIM) sends one message: its
# request {"code", "argv", "env", "cwd"} with its own fds 0, 1 and 2 attached; the child runs on those, so what it
# writes goes where the client's output goes, and the server answers {"status"} when it ends. Runs go at once (a
# pipeline of two commands is two clients).
SOCKET_LOOP = r'''
import selectors, socket

def _serve():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sys.argv[4])
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                if len(fds) != 3:  # not SHIM's request: its fds 0-2 come with it
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                req = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    conn.close()
                    _become(req, fds)
                    return req
                for fd in fds:
                    os.close(fd)
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                sel.unregister(key.fileobj)
                os.close(key.fileobj)
                status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                try:
                    conn.send(json.dumps({"status": status}).encode())
                except OSError:  # the client is gone (its shell killed): nobody to tell
                    pass
                conn.close()

_req = _serve()
'''

SERVER = PRELUDE + PIPE_LOOP + EPILOGUE
SOCKET_SERVER = PRELUDE + SOCKET_LOOP + EPILOGUE


@dataclass
class Ran:
    """What subprocess.run(..., capture_output=True, text=True) would give, with the run's wall seconds; returncode
    None when the timeout killed it, and then `hwm` the peak resident set seen just before; `peak` the child's peak
    resident set in bytes."""
    args: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    hwm: int = 0
    peak: int = 0


def _start(script: str, args: list[str], env: dict[str, str], pass_fds: tuple = ()):
    """A server process running `script` (after PRELUDE's imports), and the file its own stderr goes to (a pipe
    nobody reads could fill and stop it)."""
    stderr = tempfile.TemporaryFile()
    lists = [json.dumps(names) for names in (PRELOAD, PRELOAD_IF_PRESENT, NOT_PRELOADED)]
    proc = subprocess.Popen([sys.executable, "-c", script, *lists, *args], env=env, pass_fds=pass_fds, cwd=ROOT,
                            start_new_session=True,  # a test's Ctrl-C to its process group is not for it
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    return proc, stderr


class Server:
    def __init__(self, env: dict[str, str]):
        req_r, self._req_w = os.pipe()
        self._ans_r, ans_w = os.pipe()
        self.proc, self.stderr = _start(SERVER, [str(req_r), str(ans_w)], env, pass_fds=(req_r, ans_w))
        os.close(req_r)
        os.close(ans_w)
        self._answers = os.fdopen(self._ans_r, "r")
        self._lock = threading.Lock()

    def run(self, code: str, args, env: dict[str, str], cwd: Path | str | None = None, timeout: float = 600,
            argv0: str = "-c") -> Ran:
        args = [str(a) for a in args]
        with self._lock, tempfile.TemporaryDirectory(prefix="forkrun-") as io:
            out, err = Path(io, "stdout"), Path(io, "stderr")
            out.touch()
            err.touch()  # created here, so the child only opens them: it runs as the caller's user, in its umask
            request = {"code": code, "argv": [argv0, *args], "env": env, "cwd": str(cwd or os.getcwd()),
                       "stdin": os.devnull, "stdout": str(out), "stderr": str(err), "timeout": timeout}
            os.write(self._req_w, (json.dumps(request) + "\n").encode())
            line = self._answers.readline()
            if not line:
                self.proc.wait(30)
                raise RuntimeError(f"the fork server ended (exit {self.proc.returncode}): {_tail(self.stderr)}")
            answer = json.loads(line)
            FORKED["runs"] += 1
            FORKED["cpu"] += answer["cpu"]
            return Ran([sys.executable, "-c", code, *args], answer["status"], out.read_text(),
                       err.read_text(), answer["seconds"], answer["hwm"], answer["peak"])

    def close(self) -> None:
        os.close(self._req_w)
        self.proc.wait(30)
        self._answers.close()
        self.stderr.close()


def _tail(file) -> str:
    """The last lines a server wrote to its stderr file."""
    file.seek(0)
    return file.read().decode(errors="replace")[-2000:]


def module(name: str) -> str:
    """The code of `python -m NAME` (runpy, as Python runs it: the packages imported first, then the module)."""
    return f"import runpy; runpy.run_module({name!r}, run_name='__main__', alter_sys=True)"


_SERVERS: dict[str, Server] = {}
FORKED = {"runs": 0, "cpu": 0.0}  # forked children so far, and their user + system seconds (lab.testcpu's charges)


def run(code: str, args, env: dict[str, str], cwd: Path | str | None = None, timeout: float = 600,
        argv0: str = "-c") -> Ran:
    """`python -c code *args` with `env` (what a subprocess would get), in a child forked from this process's
    server; a server is started per distinct PYTHONPATH (the modules it preloads come from there) on first use.
    IRSURGEON_TEST_NO_FORK=1 runs every such command as a fresh subprocess instead."""
    if os.environ.get("IRSURGEON_TEST_NO_FORK"):
        return fresh(code, args, env, cwd, timeout)
    key = env.get("PYTHONPATH", "")
    server = _SERVERS.get(key)
    if server is not None and server.proc.poll() is not None:
        raise RuntimeError(f"the fork server ended between runs (exit {server.proc.returncode}): "
                           f"{_tail(server.stderr)}")
    if server is None:
        server = _SERVERS[key] = Server({**os.environ, "PYTHONPATH": key})  # never a run's HOME: nothing lands there
    return server.run(code, args, env, cwd, timeout, argv0)


def completed(code: str, args, env: dict[str, str], cwd: Path | str | None = None, timeout: float = 600,
              argv0: str = "-c") -> Ran:
    """`run`, raising subprocess.TimeoutExpired past the timeout as subprocess.run does."""
    ran = run(code, args, env, cwd, timeout, argv0)
    if ran.returncode is None:
        raise subprocess.TimeoutExpired(ran.args, timeout, ran.stdout, ran.stderr)
    return ran


def fresh(code: str, args, env: dict[str, str], cwd: Path | str | None = None, timeout: float = 600) -> Ran:
    """The same run in a new interpreter: what `run` stands in for. Its peak resident set is its VmHWM, sampled while
    it runs (wait4's ru_maxrss would not do: a child exec'd from this process inherits this process's high-water
    mark, over 1 GB late in a test run); a run past the timeout is killed with its group."""
    cmd, start, peak = [sys.executable, "-c", code, *map(str, args)], time.perf_counter(), 0
    with tempfile.TemporaryDirectory(prefix="forkrun-") as io:
        out, err = Path(io, "stdout"), Path(io, "stderr")
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                                    start_new_session=True)
        while proc.poll() is None and time.perf_counter() - start <= timeout:
            peak = max(peak, vm_hwm(proc.pid))
            time.sleep(0.01)
        if proc.poll() is None:  # past the timeout
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return Ran(cmd, None, out.read_text(), err.read_text(), time.perf_counter() - start, peak, peak)
        return Ran(cmd, proc.returncode, out.read_text(), err.read_text(), time.perf_counter() - start, 0, peak)


def vm_hwm(pid: int) -> int:
    """A process's peak resident set in bytes so far (/proc: VmHWM); 0 once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return int(next(ln for ln in status if ln.startswith("VmHWM")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


# The client a shell runs for a command (`python -I -S SHIM_FILE ARGS`: no site, so it starts in milliseconds): its
# request and its fds 0-2 to the socket $IRSURGEON_FORKRUN_SOCKET names; then it ends as the forked run ended.
SHIM = r'''
import json, os, signal, socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
client.connect(os.environ["IRSURGEON_FORKRUN_SOCKET"])
request = {"code": CODE, "argv": [ARGV0, *sys.argv[1:]], "env": dict(os.environ), "cwd": os.getcwd()}
socket.send_fds(client, [json.dumps(request).encode()], [0, 1, 2])
answer = client.recv(1 << 16)
if not answer:
    sys.exit("forkrun: the shell's fork server ended before the run did")
status = json.loads(answer)["status"]
if status < 0:  # ended by a signal: so does this process, for the shell to see
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
'''


class ShellServer:
    """A SOCKET_SERVER for the commands a shell script runs: `command(bin_dir, name, code)` writes an executable
    `name` into bin_dir that runs `code` forked from it (put bin_dir first on the script's PATH, and `env()` into
    its environment)."""

    def __init__(self, env: dict[str, str]):
        self._dir = tempfile.TemporaryDirectory(prefix="forkrun-shell-")
        self.socket = Path(self._dir.name, "socket")
        self.proc, self.stderr = _start(SOCKET_SERVER, [str(self.socket)], env)
        deadline = time.monotonic() + 120
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the shell's fork server did not start: {_tail(self.stderr)}")
            time.sleep(0.01)

    def env(self) -> dict[str, str]:
        return {"IRSURGEON_FORKRUN_SOCKET": str(self.socket)}

    def command(self, bin_dir: Path, name: str, code: str, argv0: str = "-c") -> Path:
        client = bin_dir / f"{name}-client.py"
        client.write_text(f"CODE, ARGV0 = {code!r}, {argv0!r}\n" + SHIM)
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{client}" "$@"\n')
        script.chmod(0o755)
        return script

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.stderr.close()
        self._dir.cleanup()


_SHELL: list[ShellServer] = []


def shell_server() -> ShellServer:
    """This process's ShellServer, started on first use (with this checkout first on PYTHONPATH)."""
    if not _SHELL or _SHELL[0].proc.poll() is not None:
        from lab import procs
        _SHELL[:] = [ShellServer(procs.env())]
    return _SHELL[0]


@atexit.register
def _close_all() -> None:
    for server in _SERVERS.values():
        if server.proc.poll() is None:
            server.close()
    for shell in _SHELL:
        shell.close()
