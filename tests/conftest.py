"""Test harness: real OpenSSH sshd servers on loopback, real SGLang wheels in venvs.

The sshd fixture never silently skips: if sshd is missing it installs openssh-server when it can
(root with apt), otherwise the SSH tests fail with a clear message.
"""
from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import session_guard
import xdist_groups
from probes_util import SglangShapedServer
from server_util import tb_host, tb_prefix  # noqa: F401 - fixtures for every test

from ddprobe.inventory import Host, ServerSettings
from ddprobe.remote import RemoteOptions

# The CPU testbed's defects are asserted exactly (b16 crashes, ...). On a GPU machine the
# testbed's `auto` device would pick CUDA, where an overrun may stay silent: the GPU tests ask
# for `--testbed-device cuda` explicitly.
os.environ.setdefault("DDTESTBED_DEVICE", "cpu")

CACHE = Path(os.environ.get("DDPROBE_TEST_CACHE", Path.home() / ".cache" / "ddprobe-tests"))
SGLANG_VERSIONS = ("0.4.10.post2", "0.5.2", "0.5.10", "0.5.23")


def _find_sshd() -> str | None:
    return shutil.which("sshd", path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin")


def ensure_sshd() -> str:
    sshd = _find_sshd()
    if sshd:
        return sshd
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "openssh-server", "openssh-client"],
                       env=env, check=False, stdout=subprocess.DEVNULL)
        sshd = _find_sshd()
        if sshd:
            return sshd
    pytest.fail("OpenSSH sshd is not installed and could not be installed: "
                "run `apt-get install openssh-server` (the SSH suite never skips)")


def ensure_program(name: str, apt_package: str) -> str:
    """A program the tests need (rg, bwrap, xmllint...): found on PATH, else installed with apt
    when root (as .ci/run does up front), else the test fails saying what to install."""
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/bin")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", apt_package], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not shutil.which(name):
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=False,
                           stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-qq", apt_package], env=env,
                           check=False, stdout=subprocess.DEVNULL)
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"{name} is not installed and could not be installed: run `apt-get install "
                f"{apt_package}` (.ci/run installs it)")


@dataclass(frozen=True)
class SshServer:
    host: str
    port: int
    user: str
    key: Path
    known_hosts: Path
    ssh_config: Path  # Host alias `gpu-<name>` -> this server, with our key and known_hosts
    alias: str
    log: Path
    dir: Path
    pid: int

    @property
    def home(self) -> Path:
        """`$HOME` of a login on this server (sshd_config SetEnv): the host's own `~`."""
        return self.dir / "home"


def _keygen(p: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(p)], check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited rc={proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError("sshd did not become ready")


SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
PermitRootLogin yes
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp {sftp}
LogLevel VERBOSE
SetEnv HOME={d}/home
{extra}"""


def start_sshd(d: Path, alias: str, client_key: Path | None = None, *, extra: str = "",
               sftp: str = "internal-sftp") -> tuple[SshServer, subprocess.Popen[bytes]]:
    sshd = ensure_sshd()
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    _keygen(d / "host_ed25519")
    if client_key is None:
        client_key = d / "client_ed25519"
        _keygen(client_key)
    shutil.copy(str(client_key) + ".pub", d / "authorized_keys")
    (d / "authorized_keys").chmod(0o600)
    Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
    # The host's own home (`~` on it: the default workdir ~/.ddprobe with its lock and
    # pidfiles): two hosts, or the hosts of two sessions side by side, never share one
    (d / "home").mkdir(exist_ok=True)
    log = d / "sshd.log"
    proc: subprocess.Popen[bytes] | None = None
    for attempt in range(5):  # sshd cannot bind port 0: retry on the free-port race
        port = _free_port()
        cfg = d / "sshd_config"
        cfg.write_text(SSHD_CONFIG.format(port=port, d=d, sftp=sftp, extra=extra))
        subprocess.run([sshd, "-t", "-f", str(cfg)], check=True)
        fh = open(log, "ab")
        proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(cfg)], stderr=fh,
                                stdin=subprocess.DEVNULL)
        try:
            _wait_ready(port, proc)
            break
        except (RuntimeError, TimeoutError) as e:
            proc.kill()
            proc.wait()
            if attempt == 4:
                raise RuntimeError("sshd failed to start:\n" + log.read_text()[-4000:]) from e
    assert proc is not None
    typ, b64 = (d / "host_ed25519.pub").read_text().split()[:2]
    kh = d / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{port} {typ} {b64}\n")
    user = getpass.getuser()
    sc = d / "ssh_config"
    sc.write_text(
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
        f"  IdentityFile {client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n"
        f"  StrictHostKeyChecking yes\n  ServerAliveInterval 15\n"
        f"Host *\n  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n"
        f"  IdentityFile {client_key}\n  IdentitiesOnly yes\n  BatchMode yes\n")
    return SshServer("127.0.0.1", port, user, client_key, kh, sc, alias, log, d, proc.pid), proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd-a"), "gpu-a")
    try:
        yield server
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def sshd2(tmp_path_factory: pytest.TempPathFactory, sshd: SshServer) -> Iterator[SshServer]:
    """A second host (same client key) for fan-out tests."""
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd-b"), "gpu-b", client_key=sshd.key)
    try:
        yield server
    finally:
        _stop(proc)


NOISY_RC = """\
# what GPU images' rc files print: conda init, environment modules, a greeting
echo "conda: (base) environment activated"
echo 'Lmod: loaded modules cuda/12.4 nccl/2.21' >&2
printf 'Welcome to the GPU node\\n'
echo '{"ready": 1}'
"""


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory: pytest.TempPathFactory, sshd: SshServer
                 ) -> Iterator[Callable[..., SshServer]]:
    """More sshd servers with their own sshd_config lines (same client key as `sshd`), made
    on first use and stopped at the end of the session."""
    made: dict[str, tuple[SshServer, subprocess.Popen[bytes]]] = {}

    def make(name: str, *, extra: str = "", sftp: str = "internal-sftp",
             setup: Callable[[Path], str] | None = None) -> SshServer:
        if name not in made:
            d = tmp_path_factory.mktemp(f"sshd-{name}")
            more = setup(d) if setup is not None else ""
            made[name] = start_sshd(d, f"gpu-{name}", client_key=sshd.key, sftp=sftp,
                                    extra=extra + more)
        return made[name][0]
    try:
        yield make
    finally:
        for _, proc in made.values():
            _stop(proc)


def _sftp_server() -> str:
    return next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                             "/usr/libexec/sftp-server") if os.path.exists(p)), "internal-sftp")


@pytest.fixture(scope="session")
def sshd_noisy(sshd_factory: Callable[..., SshServer]) -> SshServer:
    """A host whose login shell prints on stdout and stderr before every command and before
    the sftp-server subsystem, as an rc file that echoes does on a real host. (sshd runs
    ForceCommand through root's login shell; it sources the rc file, then runs the command
    the client sent, as the login shell would.)"""
    def setup(d: Path) -> str:
        rc = d / "noisy_rc"
        rc.write_text(NOISY_RC)
        return f'ForceCommand . {rc}; exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    return sshd_factory("noisy", sftp=_sftp_server(), setup=setup)


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold CACHE/.<name>.lock (flock) while one entry of the test cache is checked or built:
    pytest-xdist workers, and test sessions run side by side, never build one entry twice at
    once (a second waits, then finds it ready)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wheel(version: str) -> Path:
    with cache_lock(f"wheel-{version}"):
        return _wheel_unlocked(version)


def _wheel_unlocked(version: str) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for src in (wheels, Path("/tmp/wheels")):
        found = sorted(src.glob(f"sglang-{version}-*.whl")) if src.is_dir() else []
        if found:
            if src != wheels:
                shutil.copy(found[0], wheels / found[0].name)
            return wheels / found[0].name
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                    f"sglang=={version}"], check=True)
    return sorted(wheels.glob(f"sglang-{version}-*.whl"))[0]


def make_sglang_venv(version: str) -> Path:
    """A cached venv with the real sglang wheel installed --no-deps; returns its python."""
    with cache_lock(f"venv-{version}"):
        return _make_sglang_venv(version)


def _make_sglang_venv(version: str) -> Path:
    venv = CACHE / "venvs" / f"sglang-{version}"
    py = venv / "bin" / "python"
    marker = venv / ".ddprobe-ready"
    if marker.exists() and py.exists():
        return py
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--target",
                    str(_site_packages(py)), str(_wheel(version))], check=True)
    marker.write_text(version)
    return py


def _site_packages(py: Path) -> Path:
    out = subprocess.run([str(py), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


@pytest.fixture(scope="session")
def sglang_venv() -> Callable[[str], Path]:
    return make_sglang_venv


@pytest.fixture
def make_host(sshd: SshServer) -> Callable[..., Host]:
    def make(name: str = "gpu-a", *, python: str | Path = sys.executable, package: str = "sglang",
             env: dict[str, str] | None = None, server: ServerSettings | None = None,
             server_: SshServer | None = None) -> Host:
        s = server_ or sshd
        return Host(name=name, host=s.alias, python=str(python), package=package,
                    env=tuple((env or {}).items()), server=server or ServerSettings(),
                    transport="ssh", source="test")
    return make


def _sshd_config(request: pytest.FixtureRequest) -> Path | None:
    """The ssh_config reaching the test's sshd fixture(s) (sshd, and sshd2 merged in when the
    test uses both), or None for a test without one."""
    if "sshd" not in request.fixturenames and "make_host" not in request.fixturenames:
        return None
    server: SshServer = request.getfixturevalue("sshd")
    cfg = server.ssh_config
    if "sshd2" in request.fixturenames:
        s2: SshServer = request.getfixturevalue("sshd2")
        merged = server.dir / "ssh_config_ab"
        merged.write_text(cfg.read_text().split("Host *")[0] + s2.ssh_config.read_text())
        cfg = merged
    return cfg


@pytest.fixture
def ssh_opts(request: pytest.FixtureRequest) -> RemoteOptions:
    """The RemoteOptions a test passes to `remote.connect` (there is no process default): the
    sshd fixture(s)' ssh_config (sshd+sshd2 merged when the test uses both); plain
    RemoteOptions() for a test on local hosts only."""
    cfg = _sshd_config(request)
    return RemoteOptions(ssh_config=str(cfg)) if cfg is not None else RemoteOptions()


@pytest.fixture(autouse=True)
def _ssh_config_env(request: pytest.FixtureRequest,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI invocations (`main([...])`) of a test that uses an sshd get its ssh_config as
    --ssh-config through the environment (DDPROBE_SSH_CONFIG), never a module global."""
    cfg = _sshd_config(request)
    if cfg is not None:
        monkeypatch.setenv("DDPROBE_SSH_CONFIG", str(cfg))
    else:
        monkeypatch.delenv("DDPROBE_SSH_CONFIG", raising=False)


def write_inventory(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def sgl() -> Iterator[SglangShapedServer]:
    """A real HTTP server on loopback that answers like SGLang (tests/probes_util.py)."""
    srv = SglangShapedServer().start()
    try:
        yield srv
    finally:
        srv.stop()



@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's run directory ($DDPROBE_RUNS, for in-process runs and the processes the test
    starts)."""
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"

# ----- the session guard (tests/session_guard.py): its own testbed port, no server left behind --

_BASETEMP = pytest.StashKey[list[Path]]()
_LEFT = pytest.StashKey[list[session_guard.ServerProc]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): the tests of one group run on one "
                            "pytest-xdist worker (`-n 4 --dist loadgroup`)")
    session_guard.choose_testbed_port(os.environ)
    session_guard.new_session_token(os.environ)
    xdist_groups.configure(config)
    config.stash[_BASETEMP] = []


@pytest.fixture(scope="session", autouse=True)
def _session_basetemp(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where this session's hosts and servers live: what makes a server this session's own.
    The built-in testbed host (installed and run under $XDG_DATA_HOME/ddprobe/testbed) lives
    there too: sessions side by side (pytest-xdist workers, other runs on the machine) never
    share its workdir, lock or server record, and none touches the user's ~/.local/share."""
    base = tmp_path_factory.getbasetemp()
    request.config.stash[_BASETEMP].append(base)
    os.environ["XDG_DATA_HOME"] = str(base / "xdg-data")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    left = session_guard.own_servers(os.environ[session_guard.SESSION_VAR],
                                     config.stash.get(_BASETEMP, []))
    config.stash[_LEFT] = left
    if left:
        session_guard.stop(left)
        if config.pluginmanager.get_plugin("terminalreporter") is None:
            print(session_guard.warning_text(left), file=sys.__stderr__)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.section("servers left running", yellow=True)
        terminalreporter.line(session_guard.warning_text(left), yellow=True)


@pytest.fixture(scope="session")
def sglang_wheel() -> Callable[[str], Path]:
    """The real SGLang wheel of a version (cached; downloaded from the registry on first use)."""
    return _wheel



# ----- pytest-xdist (`-n 4 --dist loadgroup`: tests/xdist_groups.py) ---------------------------

@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xdist_groups.collected(config, items)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    return xdist_groups.make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    xdist_groups.unconfigure(config)
