"""``python -m azkaban_jobtype``: the command the job type's plugin.properties gives Azkaban."""
import sys

from .runner import main

sys.exit(main())
