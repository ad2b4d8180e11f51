"""``python -m perfsuite.worker JOB OUT``: the one entry point of every burst process.

Run directly for one process, or under torchrun for several torch ranks. It reads the
Job, hands it to the framework's backend, and writes the backend's WorkerRecord (the
leader only) or, on any failure, this rank's last error line beside OUT.
"""

from perfsuite.worker.main import main

if __name__ == "__main__":
    main()
