"""``python -m gputrain ...`` is the same as the ``gputrain`` console script."""

from .cli import main

raise SystemExit(main())
