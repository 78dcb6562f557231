"""Sandbox launcher: the first process of a sandbox, run as `python -I -S -c <this source>`.

It reads its config (a Python literal) on stdin, isolates itself with Linux namespaces (a
network namespace with no interfaces up, a pid namespace, a mount namespace where every mount
is read-only except a size-limited tmpfs work dir; a user namespace when not root), writes the
files, then forks:

    launcher (outside the namespaces; exits with the worker's status)
      `- init   (pid 1 of the new pid namespace; dies with the launcher: PR_SET_PDEATHSIG)
           `- worker  (rlimits, unprivileged uid when we are root, scrubbed env) -> exec python

pid 1 ignores signals it has no handler for (kernel-sent SIGXCPU included), so the untrusted
code never runs as pid 1. When init dies the kernel kills everything left in the namespace, so
killing the launcher's process group at a timeout takes every descendant with it, even ones
that called setsid(). Status lines (Python literals) go to `status_fd`, which the worker never
inherits.

This file must stay standard-library only and importable by any Python 3.8+.
"""
from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import sys

TYPE_CHECKING = False  # typing is not imported at run time (it costs every sandbox its import)
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
PR_SET_PDEATHSIG = 1
LOCKED_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}

libc = ctypes.CDLL(None, use_errno=True)


def _emit(fd: int, obj: dict[str, Any]) -> None:
    # repr of plain str/int/list/dict: the parent reads it with ast.literal_eval (json would
    # cost this process an import of `re`, ~10 ms per sandbox)
    os.write(fd, (repr(obj) + "\n").encode())


def _literal(text: str) -> dict[str, Any]:
    """The config: a Python literal (dict of str/int/list/None) written by the parent."""
    cfg: dict[str, Any] = eval(text, {"__builtins__": {}},
                               {"None": None, "True": True, "False": False})
    return cfg


def _unshare(flags: int) -> int:
    if libc.unshare(ctypes.c_int(flags)) == 0:
        return 0
    return ctypes.get_errno()


def _mount(src: str | None, target: str, fstype: str | None, flags: int,
           data: str | None) -> None:
    def b(s: str | None) -> bytes | None:
        return None if s is None else s.encode()
    if libc.mount(b(src), b(target), b(fstype), ctypes.c_ulong(flags), b(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s: %s" % (target, os.strerror(e)))


def _isolate(root: bool) -> tuple[int, int]:
    """Enter new namespaces; returns (flags obtained, errno of the full attempt)."""
    want = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
    if not root:
        want |= CLONE_NEWUSER
    attempts = [want, want & ~CLONE_NEWPID & ~CLONE_NEWIPC,
                (CLONE_NEWNET | (0 if root else CLONE_NEWUSER))]
    first_err = 0
    for flags in attempts:
        uid, gid = os.getuid(), os.getgid()
        err = _unshare(flags)
        if err == 0:
            if flags & CLONE_NEWUSER:
                # map our uid to itself: file permissions stay exactly what they were
                for path, text in (("/proc/self/setgroups", "deny"),
                                   ("/proc/self/uid_map", "%d %d 1" % (uid, uid)),
                                   ("/proc/self/gid_map", "%d %d 1" % (gid, gid))):
                    with open(path, "w") as f:
                        f.write(text)
            return flags, first_err
        first_err = first_err or err
    return 0, first_err


def _mountinfo() -> list[tuple[str, str]]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            mp = parts[4].encode().decode("unicode_escape")  # \040 for spaces
            out.append((mp, parts[5]))
    return out


def _readonly_except(keep: str) -> list[str]:
    failed = []
    for mp, opts in _mountinfo():
        if mp == keep or mp.startswith(keep.rstrip("/") + "/"):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in opts.split(","):
            flags |= LOCKED_FLAGS.get(opt, 0)
        try:
            _mount(None, mp, None, flags, None)
        except OSError:
            failed.append(mp)
    return failed


def _setup_fs(cfg: dict[str, Any], sbx_uid: int | None, notes: list[str], iso: list[str]) -> None:
    work = cfg["workdir"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # Empty the usual homes of unix sockets (docker, ssh-agent, X, dbus): a network namespace
    # does not cover sockets that live in the file system.
    hidden = []
    for d in ("/tmp", "/var/tmp", "/run", "/dev/shm"):
        if (os.path.isdir(d) and not os.path.islink(d)
                and not cfg["python"].startswith(d + "/")):
            try:
                _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0755")
                hidden.append(d)
            except OSError:
                pass
    if hidden:
        iso.append("empty " + ", ".join(hidden))
    homes = _hide_homes(cfg["python"])
    if homes:
        iso.append("no home directories (empty %s)" % ", ".join(homes))
    os.makedirs(work, exist_ok=True)  # its parent may be one of the emptied directories
    data = "size=%d,mode=0700" % cfg["tmpfs_bytes"]
    if sbx_uid is not None:
        data += ",uid=%d,gid=%d" % (sbx_uid, sbx_uid)
    try:
        _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, data)
        iso.append("tmpfs work dir (%d MiB)" % (cfg["tmpfs_bytes"] >> 20))
    except OSError as e:
        notes.append("work dir is not a size-limited tmpfs (%s)" % e.strerror)
        _mount(work, work, None, MS_BIND | MS_REC, None)
    failed = _readonly_except(work)
    if "/" in failed:
        notes.append("file system NOT read-only: remounting / failed")
    else:
        iso.append("read-only file system outside the work dir")


def _home_dirs() -> list[str]:
    out = []
    for d in ("/home", "/root", os.path.expanduser("~" + _user_name())):
        d = os.path.realpath(d) if d else d
        if d and d != "/" and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def _user_name() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return ""


def _hide_homes(python: str) -> list[str]:
    """Cover every home directory with an empty tmpfs; when the interpreter lives under one
    (pyenv in ~/.pyenv, a venv in ~/venvs), bind its prefix back, read-only, and nothing else."""
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    hidden = []
    for home in _home_dirs():
        keep = prefix if prefix.startswith(home.rstrip("/") + "/") else None
        fd = os.open(keep, os.O_RDONLY | getattr(os, "O_PATH", 0)) if keep else None
        try:
            _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
            hidden.append(home)
            if keep and fd is not None:
                os.makedirs(keep, exist_ok=True)
                _mount("/proc/self/fd/%d" % fd, keep, None, MS_BIND | MS_REC, None)
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
    return hidden


def _write_files(cfg: dict[str, Any], sbx_uid: int | None) -> None:
    for name, text in cfg["files"].items():
        path = os.path.join(cfg["workdir"], name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        if sbx_uid is not None:
            os.chown(path, sbx_uid, sbx_uid)
    if sbx_uid is not None:
        os.chown(cfg["workdir"], sbx_uid, sbx_uid)


def _worker(cfg: dict[str, Any], sbx_uid: int | None) -> None:
    lim = cfg["limits"]
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    if sbx_uid is not None:
        os.setgroups([])
        os.setgid(sbx_uid)
        os.setuid(sbx_uid)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for res, soft, hard in ((resource.RLIMIT_CPU, lim["cpu_s"], lim["cpu_s"] + 1),
                            (resource.RLIMIT_AS, lim["memory_bytes"], lim["memory_bytes"]),
                            (resource.RLIMIT_NPROC, lim["nproc"], lim["nproc"]),
                            (resource.RLIMIT_FSIZE, lim["fsize_bytes"], lim["fsize_bytes"]),
                            (resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
                            (resource.RLIMIT_CORE, 0, 0)):
        resource.setrlimit(res, (soft, hard))
    os.chdir(cfg["workdir"])
    os.umask(0o077)
    py = cfg["python"]
    os.execve(py, [py, "-I", "-S", "-B"] + cfg["argv"], cfg["env"])


def _init(cfg: dict[str, Any], sbx_uid: int | None, status_fd: int, lifeline: int) -> None:
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if cfg.get("own_proc"):
        # pid 1 of the new pid namespace: a fresh /proc shows this namespace's processes only
        # (no other process's command line, environment or open files)
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        except OSError:
            pass
    # getppid() is 0 across a pid namespace, so ask the lifeline pipe instead: EOF on it
    # means the launcher died before PR_SET_PDEATHSIG was armed.
    if select.select([lifeline], [], [], 0)[0]:
        os._exit(137)
    pid = os.fork()
    if pid == 0:
        try:
            _worker(cfg, sbx_uid)
        except BaseException as e:
            _emit(status_fd, {"error": "%s: %s" % (type(e).__name__, e)})
        os._exit(126)
    while True:
        wpid, st = os.waitpid(-1, 0)  # pid 1 reaps every orphan of the namespace
        if wpid == pid:
            break
    if os.WIFSIGNALED(st):
        _emit(status_fd, {"signal": os.WTERMSIG(st)})
        os._exit(128 + os.WTERMSIG(st))
    _emit(status_fd, {"exit": os.WEXITSTATUS(st)})
    os._exit(os.WEXITSTATUS(st))


def main() -> None:
    cfg = _literal(sys.stdin.read())
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)
    root = os.geteuid() == 0
    sbx_uid = cfg.get("uid") if root else None
    iso, notes = [], []
    got, err = _isolate(root)
    if got & CLONE_NEWNET:
        iso.append("network namespace (no network)")
    else:
        notes.append("network NOT isolated: unshare(CLONE_NEWNET) failed (%s); the code can "
                     "open connections" % os.strerror(err or 1))
    if got & CLONE_NEWPID:
        iso.append("pid namespace")
    else:
        notes.append("no pid namespace: descendants that leave the process group may outlive "
                     "a timeout")
    if got & CLONE_NEWNS:
        try:
            _setup_fs(cfg, sbx_uid, notes, iso)
        except OSError as e:
            notes.append("file system NOT isolated: %s" % e)
    else:
        notes.append("no mount namespace: the code can write wherever this user can")
    if got & CLONE_NEWNS and got & CLONE_NEWPID:
        cfg["own_proc"] = True
        iso.append("own /proc (no other processes)")
    else:
        notes.append("/proc shows every process of the machine (command lines included)")
    if sbx_uid is not None:
        iso.append("unprivileged uid %d" % sbx_uid)
    elif root:
        notes.append("running as root without a uid switch: RLIMIT_NPROC does not bind root")
    _write_files(cfg, sbx_uid)
    _emit(status_fd, {"isolation": iso, "notes": notes})
    lifeline_r, lifeline_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(lifeline_w)
        _init(cfg, sbx_uid, status_fd, lifeline_r)
    _, st = os.waitpid(pid, 0)
    code = 128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)
    sys.exit(code)


if __name__ == "__main__":
    main()
