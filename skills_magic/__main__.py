"""`python -m skills_magic` is the `skills-magic` command."""

from skills_magic.cli import main

raise SystemExit(main())
