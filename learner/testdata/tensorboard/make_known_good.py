"""Writes known_good.tfevents: four records framed by TensorBoard's own RecordWriter, for
learner/src/run/tensorboard.rs's unit test (which encodes the same events and compares the bytes).

    python3 -m pip install tensorboard   # 2.21.0 made the file
    python3 learner/testdata/tensorboard/make_known_good.py

The events: the file version (`brain.Event:2`), a SessionLog START at step 1, one scalar event
at step 256 with two simple values, and the text summary of a config (the text plugin's own
`text_pb`), each with a fixed wall time.
"""

import io
import os

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.text.summary_v2 import text_pb
from tensorboard.summary.writer.record_writer import RecordWriter

WALL = 1_700_000_000.25

events = [
    event_pb2.Event(wall_time=WALL, step=0, file_version="brain.Event:2"),
    event_pb2.Event(
        wall_time=WALL,
        step=1,
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START),
    ),
    event_pb2.Event(
        wall_time=WALL,
        step=256,
        summary=summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag="rollout/ep_rew_mean", simple_value=21.5),
                summary_pb2.Summary.Value(tag="train/loss", simple_value=-0.125),
            ]
        ),
    ),
    event_pb2.Event(
        wall_time=WALL,
        step=0,
        summary=text_pb("config", '```toml\n[run]\nenv = "CartPole-v1"\n```'),
    ),
]

buffer = io.BytesIO()
writer = RecordWriter(buffer)
for event in events:
    writer.write(event.SerializeToString())
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_good.tfevents")
with open(out, "wb") as f:
    f.write(buffer.getvalue())
print(f"{out}: {len(buffer.getvalue())} bytes")
