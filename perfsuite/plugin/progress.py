"""Live progress of the running burst: "<burst label> step k/n  <rate> img/s" (tokens/s for a token model).

On a terminal one line below pytest's own is rewritten in place and erased when the
burst ends, leaving the cursor where pytest left it. Elsewhere (CI logs) a plain line
per timed window. Silent under -q and where pytest has no terminal reporter (xdist
workers). The launcher calls the display with the worker's progress state: ``{}`` when
the burst starts, ``{"step", "steps", "throughput", "windows"}`` while it runs (the last finished
window's rate), and None when it is over.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

from perfsuite.common.numbers import fixed
from perfsuite.contract.spec import BurstSpec

CLEAR = "\x1b[K"  # erase to the end of the line


def display_for(config: Any) -> ProgressDisplay | None:
    """The display for this pytest run, or None where progress would be noise or has nowhere to go."""
    if getattr(config.option, "verbose", 0) < 0 or hasattr(config, "workerinput"):
        return None
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is None:
        return None
    tty = bool(getattr(reporter, "isatty", False)) and os.environ.get("TERM") != "dumb"
    return ProgressDisplay(
        reporter, config.get_terminal_writer(), config.pluginmanager.getplugin("capturemanager"), tty
    )


def text(spec: BurstSpec, state: dict, rate: float | None, width: int | None = None) -> str:
    """The progress line; ``rate`` is the last window's throughput in the burst's unit (a step
    inside a window has none).

    With ``width`` the label is shortened so that the step and the rate always show.
    """
    steps = state.get("steps")
    if not steps:
        tail = ": warming up"
    else:
        tail = f": step {state.get('step', 0)}/{steps}" + (f"  {fixed(rate)} {spec.unit}" if rate is not None else "")
    name = spec.label
    if width is not None and len(name) + len(tail) > width:
        name = name[: max(0, width - len(tail) - 1)] + "…"
    return name + tail


class ProgressDisplay:
    def __init__(self, reporter: Any, writer: Any, capture: Any = None, tty: bool = False) -> None:
        self.reporter = reporter
        self.writer = writer  # pytest's TerminalWriter (Config.get_terminal_writer)
        self.capture = capture
        self.tty = tty
        self._active = False  # a burst has shown something
        self._rate: float | None = None  # the last window's throughput, in the burst's unit
        self._window = 0  # log: windows completed when the last line was written
        self._column = 0  # where pytest's own line stood when the burst started
        self._prefix: str | None = None  # non-tty: pytest's unfinished line, written again afterwards

    def __call__(self, spec: BurstSpec, state: dict | None) -> None:
        with self._uncaptured():
            if state is None:
                self._end()
                return
            if state.get("throughput") is not None:
                self._rate = float(state["throughput"])
            if self.tty:
                self._rewrite(spec, state)
                return
            # A log line per completed window; the launcher polls, so an edge state can be missed.
            window = state.get("step", 0) // spec.steps_per_window
            if not state or window > self._window:
                self._window = window
                self._line(text(spec, state, self._rate))

    # -- a terminal: one line, rewritten ---------------------------------------------
    def _rewrite(self, spec: BurstSpec, state: dict) -> None:
        writer = self.writer
        width = max(20, getattr(writer, "fullwidth", 80) - 1)  # a wrapped line could not be rewritten with \r
        if not self._active:
            self._active = True
            self._column = getattr(writer, "width_of_current_line", 0) % (width + 1)
            if self._column:
                self._raw("\n")  # pytest's line keeps its text; ours goes below it
        self._raw(f"\r{text(spec, state, self._rate, width)}{CLEAR}", flush=True)

    def _raw(self, content: str, flush: bool = False) -> None:
        """Writes past pytest's bookkeeping of the current line: pytest 9's write_raw; before it
        (pytest 8) straight to the stream its terminal writer holds."""
        raw = getattr(self.reporter, "write_raw", None)
        if raw is not None:
            raw(content, flush=flush)
            return
        stream = self.writer._file
        stream.write(content)
        if flush:
            stream.flush()

    # -- a log: plain lines ------------------------------------------------------------
    def _line(self, line: str) -> None:
        writer = self.writer
        if not self._active:
            self._active = True
            self._prefix = getattr(writer, "_current_line", None)
            if self._prefix:
                writer.line()
            elif self._prefix is None:
                self.reporter.ensure_newline()
        writer.line(line)
        writer.flush()

    def _end(self) -> None:
        if self._active:
            if self.tty:
                back = f"\x1b[1A\x1b[{self._column}C" if self._column else ""
                self._raw(f"\r{CLEAR}{back}", flush=True)
            elif self._prefix:
                # pytest goes on writing its result after the text it believes is on the line.
                self.writer.write(self._prefix, flush=True)
        self._active, self._rate, self._window, self._column, self._prefix = False, None, 0, 0, None

    def _uncaptured(self):
        """During a test pytest captures output; the display must reach the terminal."""
        if self.capture is None:
            return nullcontext()
        return self.capture.global_and_fixture_disabled()
