"""The --perf-report folder: results JSON, markdown, self-contained HTML and plots.

Importing this package stays light; matplotlib is imported only while plots are drawn.
"""

from perfsuite.reporting.folder import write_report

__all__ = ["write_report"]
