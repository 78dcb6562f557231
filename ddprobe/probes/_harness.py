# The trusted first program of a test run in the sandbox (sandbox.run_tests_async reads this
# file as text and runs it there; never imported). Stdlib only, Python 3.8+.
import os
import signal
import sys

fd = int(os.environ.pop("DDPROBE_NONCE_FD"))
nonce = os.read(fd, 256).decode()
os.close(fd)
try:
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
except Exception:
    pass
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.set_inheritable(w, True)
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "runner.py", str(w)])
os.close(w)
done = b""
while True:
    chunk = os.read(r, 64)
    if not chunk:
        break
    done = (done + chunk)[:64]
_, st = os.waitpid(pid, 0)
if os.WIFSIGNALED(st):
    sig = os.WTERMSIG(st)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)
code = os.WEXITSTATUS(st)
if code == 0 and done == b"DDPROBE-DONE":
    sys.stdout.write("\n%s\n" % nonce)
sys.stdout.flush()
os._exit(code)
