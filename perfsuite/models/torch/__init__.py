"""PyTorch model zoo: one module per architecture, each registering its builder.

The registry imports every module here but the shared building blocks (``layers``,
``transformer_layers``: a module whose name ends in ``layers``), so a new model is one module.
A model module imports only the registry and the catalog at top level; torch and the building
blocks are imported inside the builders, so listing models works without torch installed.
"""
