from __future__ import annotations

from ddprobe.entry import main

raise SystemExit(main())
