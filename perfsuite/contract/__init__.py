"""What crosses the process boundary between pytest and a burst worker.

BurstSpec and its vocabulary, the versioned Job and WorkerRecord, the burst folder's
files and the frameworks' capabilities. Imports only ``perfsuite.common``.
"""
