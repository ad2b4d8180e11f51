"""A tiny registered model for the plugin's own tests: bursts take milliseconds per step.

``PERFSUITE_TINY_STEP_MS`` sets a fixed cost per forward pass so timings are stable on a
busy machine, and ``PERFSUITE_TINY_SLOWDOWN`` multiplies it: a known, injected slowdown.
``PERFSUITE_TINY_JITTER`` adds a random extra cost of up to that many step costs (a noisy
machine). ``PERFSUITE_TINY_CRASH`` makes the builder raise, ``PERFSUITE_TINY_NAN`` the loss NaN.
``PERFSUITE_TINY_KILL_RANK`` names a rank that sends itself SIGKILL on its fifth forward pass (as
the OOM killer would end it; "any": every rank of the process it is set for, as one node's);
``PERFSUITE_TINY_STOP_RANK`` one that sends itself SIGSTOP on its
hundredth (a frozen rank, which hangs the others' next all-reduce).
"""

import os

from perfsuite import register_model


# Registered without its parameter count and FLOPs, as a user may: every tiny burst has its
# worker count them (196 parameters; 2 x 192 x 4 = 1536 forward FLOPs per image).
@register_model("tiny", framework="torch", image_size=8, batch_size=8, cpu_batch_size=8, num_classes=4)
def tiny(num_classes: int = 4):
    """A linear classifier on 8x8 images with a fixed, sleep-based cost per step."""
    import random
    import time

    from torch import nn

    if os.environ.get("PERFSUITE_TINY_CRASH"):
        raise RuntimeError("tiny model refused to build (PERFSUITE_TINY_CRASH)")
    step_s = float(os.environ.get("PERFSUITE_TINY_STEP_MS", "4")) / 1000
    step_s *= float(os.environ.get("PERFSUITE_TINY_SLOWDOWN", "1"))
    nan = bool(os.environ.get("PERFSUITE_TINY_NAN"))
    jitter = float(os.environ.get("PERFSUITE_TINY_JITTER", "0"))
    doomed = os.environ.get("PERFSUITE_TINY_KILL_RANK") in (os.environ.get("RANK", "0"), "any")
    frozen = os.environ.get("PERFSUITE_TINY_STOP_RANK") == os.environ.get("RANK", "0")
    rng = random.Random(0)
    calls = [0]

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, num_classes)

        def forward(self, x):
            calls[0] += 1
            if doomed and calls[0] == 5:
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            if frozen and calls[0] == 100:
                import signal

                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(step_s * (1 + jitter * rng.random()))
            out = self.fc(x.flatten(1))
            return out * float("nan") if nan else out

    return Tiny()
