from __future__ import annotations

from .launch_server import main

raise SystemExit(main())
