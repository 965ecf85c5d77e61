from prefixroute.cli import main

raise SystemExit(main())
