"""``python -m enginespec.cli``: the ``enginespec`` command."""

import sys

from enginespec.cli.app import main

sys.exit(main())
