"""``kvbed.study.load(DIR)``: a study's table as a pandas DataFrame; ``run`` / ``validate`` as the CLI."""

from testbed.study.spec import load as validate  # noqa: F401
from testbed.study.table import load  # noqa: F401
