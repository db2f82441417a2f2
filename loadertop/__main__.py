from loadertop.faces.cli import main

raise SystemExit(main())
