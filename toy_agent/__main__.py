from toy_agent.cli import main

raise SystemExit(main())
