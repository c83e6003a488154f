"""Every scalar of the TensorBoard event files in a folder, as TensorBoard itself reads them
(tensorboard.backend.event_processing.event_accumulator, all events kept), for tests/records/test_tensorboard.cpp.

    python tensorboard_scalars.py RUN_DIR > scalars.json      {"tag": [[step, value], ...], ...}

Non-finite values come out as the strings "nan", "inf", "-inf" (JSON has no such numbers).
"""
import json
import math
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, SCALARS

accumulator = EventAccumulator(sys.argv[1], size_guidance={SCALARS: 0})  # 0 = keep every event
accumulator.Reload()
out = {}
for tag in accumulator.Tags()[SCALARS]:
    out[tag] = [[e.step, e.value if math.isfinite(e.value) else str(e.value)] for e in accumulator.Scalars(tag)]
json.dump(out, sys.stdout)
