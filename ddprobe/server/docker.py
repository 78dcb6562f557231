"""The `docker` manager: the server runs in a container ddprobe (re)creates for each config.

    docker rm -f NAME
    docker run -d --name NAME --label ddprobe.config=KEY --gpus all --ipc host --network host
               -e K=V ... IMAGE python3 -m sglang.launch_server <launch flags>

The container named in `server.container` belongs to ddprobe: each start replaces it. The
command inside is `server.launch` when set (placeholders as for the command manager), else
`python3 -m {package}.launch_server {args}`. Logs: `docker logs`; stop: `docker stop -t GRACE`,
then `docker rm -f`.
"""
from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from ddprobe.errors import ConfigError, RemoteCommandError
from ddprobe.server.launch import DOCKER_TEMPLATE, Launch, where
from ddprobe.server.manager import Manager, Peek, ServerStatus, StartInfo, StopInfo

DOCKER_RUN_OPTIONS = ("--gpus", "all", "--ipc", "host", "--network", "host")
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


def run_argv(launch: Launch, *, container: str, image: str) -> list[str]:
    """`docker run -d ...` for one launch (every value its own argv word). Environment
    variables are passed by name (`-e K`): docker reads the value from its own environment,
    so no value is on a command line that every user of the host can read in /proc."""
    argv = ["docker", "run", "-d", "--name", container, "--label",
            f"ddprobe.config={launch.config.key}", *DOCKER_RUN_OPTIONS]
    for k, _ in launch.env:
        argv += ["-e", k]
    return [*argv, image, *launch.argv]


class DockerManager(Manager):
    kind = "docker"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        s = self.host.server
        for key, val in (("container", s.container), ("image", s.image)):
            if not val:
                raise ConfigError(f"host '{self.host.name}' uses the docker manager but has no "
                                  f"server.{key}", key=f"server.{key}", **where(self.host))
        if not _NAME.match(s.container):
            raise ConfigError(f"server.container {s.container!r} is not a docker container name",
                              key="server.container", **where(self.host))
        self.container, self.image = s.container, s.image
        self._since: str | None = None

    def template(self) -> Sequence[str]:
        return DOCKER_TEMPLATE

    def _inspect(self) -> dict[str, str]:
        res = self.r.run(["docker", "inspect", "-f",
                          "{{.State.Status}} {{.State.Pid}} {{.State.StartedAt}} "
                          "{{index .Config.Labels \"ddprobe.config\"}}", self.container],
                         timeout=60)
        if not res.ok:
            return {}
        parts = res.stdout.strip().split(" ")
        keys = ("status", "pid", "started", "config")
        return dict(zip(keys, (parts + [""] * 4)[:4], strict=True))

    def start(self, launch: Launch) -> StartInfo:
        self.r.run(["docker", "rm", "-f", self.container], timeout=120)
        argv = run_argv(launch, container=self.container, image=self.image)
        self.r.run(argv, timeout=300, check=True, env=dict(launch.env))
        st = self._inspect()
        self._since = st.get("started") or None
        return StartInfo(self.kind, f"docker:{self.container}", None, 0.0, tuple(launch.argv))

    def stop(self, grace: float | None = None) -> StopInfo:
        g = self.host.server.stop_timeout if grace is None else grace
        st = self._inspect()
        was = st.get("status") == "running"
        t0 = time.perf_counter()
        if st:
            res = self.r.run(["docker", "stop", "-t", str(int(g)), self.container],
                             timeout=g + 120)
            if not res.ok and "No such container" not in res.stderr:
                raise RemoteCommandError(self.host.name, res.argv, res.exit_code, res.stdout,
                                         res.stderr)
            self.r.run(["docker", "rm", "-f", self.container], timeout=120)
        busy, _ = self.port_busy()
        pid = int(st.get("pid") or 0)
        return StopInfo(was_running=was, pids=(pid,) if pid else (), signals=("docker stop",),
                        port_free=not busy, elapsed=time.perf_counter() - t0)

    def status(self) -> ServerStatus:
        st = self._inspect()
        return ServerStatus(host=self.host.name, manager=self.kind,
                            running=st.get("status") == "running",
                            pids=(int(st["pid"]),) if st.get("pid", "0") not in ("", "0") else (),
                            port=self.host.server.port, config_key=st.get("config", ""),
                            log_path=f"docker:{self.container}",
                            detail=st.get("status", "no container"))

    def logs(self, *, tail: int | None = None, since: float | None = None) -> str:
        args = ["docker", "logs"]
        if since is not None:
            args += ["--since", f"{since:.3f}"]
        if tail is not None:
            args += ["--tail", str(tail)]
        # the server writes to stderr: merge the two streams in the order docker replays them
        res = self.r.run(["sh", "-c", 'exec "$@" 2>&1', "sh", *args, self.container],
                         timeout=120)
        return res.stdout

    def peek(self, offset: int) -> Peek:
        text = self.logs()
        alive = self._inspect().get("status") == "running"
        if len(text) < offset:
            offset = 0
        return Peek(alive, text[offset:], len(text))
