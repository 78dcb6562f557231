from __future__ import annotations

from ddprobe.cli import main

raise SystemExit(main())
