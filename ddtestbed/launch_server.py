"""Launch the testbed server: `python -m ddtestbed.launch_server --model-path M --port P ...`."""
from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

from .cuda import resolve_device
from .srt.entrypoints.engine import start_engine
from .srt.entrypoints.http_server import serve
from .srt.server_args import (
    DEVICE_ENV,
    STARTUP_SCALE_ENV,
    TIME_SCALE_ENV,
    build_parser,
    env_float,
    prepare_server_args,
)
from .srt.utils import SimClock, configure_logger, install_sigquit_handler

logger = logging.getLogger(__name__)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    server_args = prepare_server_args(argv)  # resolved against the scenario, like SGLang's
    scenario = server_args.scenario_obj
    try:
        server_args.testbed_device = resolve_device(server_args.testbed_device,
                                                    os.environ.get(DEVICE_ENV))
        scale = server_args.testbed_time_scale
        if scale is None:
            scale = env_float(TIME_SCALE_ENV)
        if scale is None:
            scale = scenario.timing.scale
        startup = server_args.testbed_startup_scale
        if startup is None:
            startup = env_float(STARTUP_SCALE_ENV)
        if startup is None:
            startup = scale
    except ValueError as e:
        build_parser().error(str(e))
    server_args.testbed_scenario = scenario.source
    server_args.testbed_time_scale, server_args.testbed_startup_scale = scale, startup
    configure_logger(server_args.log_level)
    install_sigquit_handler(logger)
    logger.info(f"server_args={server_args}")
    gpu = scenario.gpu
    logger.info(f"Testbed scenario '{scenario.name}': {gpu.count} x {gpu.name} ({gpu.arch}), "
                f"time scale {scale:g}, start-up scale {startup:g}, "
                f"device {server_args.testbed_device}")
    engine = start_engine(server_args, scenario, SimClock(scale, startup))
    serve(engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
