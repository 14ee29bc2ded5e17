"""`python -m agents` is the same as the `kernel-agent` command."""

from agents.cli import main

raise SystemExit(main())
