import sys

from .notebooks import main

sys.exit(main())
