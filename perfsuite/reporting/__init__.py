"""The --perf-report folder: results JSON, markdown, self-contained HTML and plots.

``perfsuite.reporting.folder.write_report`` writes it. Importing the package stays
light; matplotlib is imported only while plots are drawn.
"""
