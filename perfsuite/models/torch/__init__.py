"""PyTorch model zoo: one module per architecture, each registering its builder.

Modules here import only the registry at top level; torch and ``layers`` are imported
inside the builders, so listing models works without torch installed.
"""
