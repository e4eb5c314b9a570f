from annotate.cli import main

raise SystemExit(main())
