"""`python -m fastmace_oeq_ext`: the doctor."""
import sys

from . import doctor

sys.exit(doctor())
