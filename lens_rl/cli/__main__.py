"""``python -m lens_rl.cli`` works like ``lens-rl``."""

import sys

from lens_rl.cli import main

sys.exit(main())
