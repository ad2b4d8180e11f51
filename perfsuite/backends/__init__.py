"""Framework backends. Each runs inside a burst worker process; nothing here imports a framework.

``SUPPORTED`` says, without importing anything heavy, which data locations and variable
updates each backend implements, so the plugin can refuse or skip a case up front.
"""

SUPPORTED = {
    "torch": {
        "data_locations": ("device", "host", "python", "real"),
        "variable_updates": ("replicated", "parameter_server"),
        "worker": "perfsuite.backends.torch.worker",
        "package": "torch",
    },
    "tf": {
        "data_locations": ("device", "host", "python"),
        "variable_updates": ("replicated", "parameter_server"),
        "worker": "perfsuite.backends.tf.worker",
        "package": "tensorflow",
    },
}
