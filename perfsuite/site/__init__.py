"""The history as a static site (``python -m perfsuite history site``): what it shows
(data), its figures (plots), its pages (pages), the shared files (assets) and the writing of
it all (build)."""
