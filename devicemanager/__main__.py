from devicemanager.cli import main

raise SystemExit(main())
