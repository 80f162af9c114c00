"""`python -m fastmace_oeq_ext`: the doctor (--help, --json)."""
import sys

from .doctor import main

sys.exit(main())
