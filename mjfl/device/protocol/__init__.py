"""Wire protocol v1 between the coordinator and devices, sans I/O (spec: docs/protocol.md).

One import for both ends of a session:

- messages.py: the message dataclasses (also the events), each carrying its
  wire name (``Hello.type``), and artifacts (Program, Shard) addressed by sha256;
- tensors.py: named tensors in one aligned buffer (TensorPack);
- codec.py: whole WebSocket messages <-> messages; decoding raises only
  ProtocolError;
- session.py: what both ends of a session share (the receive path, closing,
  heartbeats, limits; State, Closed);
- coordinator.py: CoordinatorSession, the coordinator's end;
- device.py: DeviceSession, a device's end;
- credentials.py (imported on its own): the hello's HMAC proof of a
  device's secret.

Nothing here touches a socket or a clock. A server loop, in outline::

    session = CoordinatorSession("coord-1")
    async for message in websocket:
        session.receive(message)
        for event in session.events_received():
            ...  # Hello -> session.send_welcome(); Result -> the job's round
        for data in session.data_to_send():
            await websocket.send(data)
        if session.closed:
            await websocket.close(*session.websocket_close())
"""

from mjfl.device.protocol.codec import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_MAX_CONTROL_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    FIXED_HEADER,
    FLAG_MORE,
    MAGIC,
    PART_HEADER,
    PART_MAGIC,
    PROTOCOL_VERSIONS,
    Assembly,
    begin_binary,
    decode,
    decode_bytes,
    decode_text,
    encode,
    split_message,
)
from mjfl.device.protocol.coordinator import CoordinatorSession
from mjfl.device.protocol.device import DeviceSession
from mjfl.device.protocol.messages import (
    RUNTIMES,
    Bye,
    Cancel,
    Error,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Message,
    ModelSpec,
    Program,
    Provision,
    Result,
    Runtime,
    Settings,
    Shard,
    Task,
    TaskId,
    Timing,
    Welcome,
)
from mjfl.device.protocol.session import (
    WEBSOCKET_CLOSE_CODES,
    Closed,
    Event,
    Session,
    State,
)
from mjfl.device.protocol.tensors import ALIGN, DTYPES, TensorInfo, TensorPack
from mjfl.errors import SessionClosed

__all__ = [
    "ALIGN",
    "DEFAULT_HANDSHAKE_TIMEOUT_S",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "DEFAULT_MAX_CONTROL_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DTYPES",
    "FIXED_HEADER",
    "FLAG_MORE",
    "MAGIC",
    "PART_HEADER",
    "PART_MAGIC",
    "PROTOCOL_VERSIONS",
    "RUNTIMES",
    "WEBSOCKET_CLOSE_CODES",
    "Assembly",
    "Bye",
    "Cancel",
    "Closed",
    "CoordinatorSession",
    "DeviceSession",
    "Error",
    "Event",
    "Heartbeat",
    "HeartbeatAck",
    "Hello",
    "Message",
    "ModelSpec",
    "Program",
    "Provision",
    "Result",
    "Runtime",
    "Session",
    "SessionClosed",
    "Settings",
    "Shard",
    "State",
    "Task",
    "TaskId",
    "TensorInfo",
    "TensorPack",
    "Timing",
    "Welcome",
    "begin_binary",
    "decode",
    "decode_bytes",
    "decode_text",
    "encode",
    "split_message",
]
