"""`python -m server`: the Kernel Agent language server (same as `kernel-agent serve`)."""

import sys

from server.serve import main

sys.exit(main())
