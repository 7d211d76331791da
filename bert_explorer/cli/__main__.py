"""``python -m bert_explorer.cli``: what background runs launch."""
import sys

from . import main

sys.exit(main())
