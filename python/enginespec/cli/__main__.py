"""``python -m enginespec.cli``: the ``enginespec`` command."""

import sys

from enginespec.cli.main import main

sys.exit(main())
