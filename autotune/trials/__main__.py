"""``python -m autotune.trials FD TUNER_PID`` runs one trial; ``--zygote FD TUNER_PID`` starts the fork server."""

import sys

from autotune.trials.child import child_main
from autotune.trials.zygote import serve

if sys.argv[1] == "--zygote":
    serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
else:
    child_main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
