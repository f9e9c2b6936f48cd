"""``python -m cascadekit`` is the ``cascadekit`` command."""
from cascadekit.cli import main

raise SystemExit(main())
