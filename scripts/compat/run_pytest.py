"""Run pytest with Python's own SIGINT handler in place.

confluent-kafka's tests send SIGINT to their own process and expect
KeyboardInterrupt from a blocking poll()/flush(); a process started in the
background by a non-interactive shell inherits SIGINT ignored, and Python then
installs no handler, so those tests would block until their timeout.
"""

from __future__ import annotations

import signal
import sys

import pytest

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(pytest.main(sys.argv[1:]))
