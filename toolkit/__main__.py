"""``python -m toolkit`` is the ``masklab`` command."""

from toolkit.cli import main

raise SystemExit(main())
