"""``python -m benchmarks``: print the benchmark table."""

from benchmarks.runner import main

raise SystemExit(main())
