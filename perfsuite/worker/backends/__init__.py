"""One package per framework: data feeds, the training step and the burst's run()."""
