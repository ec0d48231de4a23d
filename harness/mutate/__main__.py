"""``python -m harness.mutate`` (``./dev mutate``): see harness.mutate.command.dev_main."""

import sys

from harness.mutate.command import dev_main

sys.exit(dev_main())
