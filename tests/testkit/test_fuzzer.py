"""The mutation fuzzer of protocol v1 (mjfl.testkit.fuzzer) and the properties it checks."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mjfl.device.protocol import CoordinatorSession, DeviceSession, State, decode
from mjfl.errors import ProtocolError
from mjfl.testkit import fuzzer as fuzz


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_no_mutated_input_escapes_the_protocol_errors_from_any_seed(seed):
    fuzzer = fuzz.Fuzzer(np.random.default_rng(seed))
    figures = fuzzer.run(150)
    assert figures.unhandled == 0, figures.examples
    assert figures.inputs == 150 and sum(figures.rejected.values()) + figures.decoded == 150
    assert set(figures.rejected) <= fuzz.DOCUMENTED_CODES


def test_the_seeds_are_valid_and_the_mutations_reach_deep_checks():
    for message in fuzz.seeds()[:-2]:  # the last two are parts of one split message
        decode(message)
    figures = fuzz.Fuzzer(np.random.default_rng(7)).run(2000)
    # Not only framing: the header, the tensor table and the session rules are reached too.
    for code in ("bad_frame", "bad_message", "bad_tensor_table", "unknown_type", "message_too_big"):
        assert figures.rejected[code] > 0, figures.rejected
    for code in ("unexpected_message", "unknown_job", "missing_artifact"):
        assert figures.session_closed[code] > 0, figures.session_closed
    assert figures.decoded > 0


def test_same_seed_same_figures():
    a = fuzz.Fuzzer(np.random.default_rng(3)).run(300).as_dict()
    b = fuzz.Fuzzer(np.random.default_rng(3)).run(300).as_dict()
    assert a == b


def test_the_fuzzer_reports_a_decoder_that_raises_something_else(monkeypatch):
    real = fuzz.decode_text

    def broken(text, **kw):
        if '"seq"' in text:
            raise KeyError("seq")  # a planted bug: a decoder that lets a KeyError out
        return real(text, **kw)

    monkeypatch.setattr(fuzz, "decode_text", broken)
    fuzzer = fuzz.Fuzzer(np.random.default_rng(0))
    fuzzer.check(json.dumps({"type": "heartbeat", "seq": 1, "sent_at": 0.0}))
    assert fuzzer.figures.unhandled == 1 and "KeyError" in fuzzer.figures.examples[0]["what"]


# -- the session state machine, over sequences ----------------------------------------------

SESSION_STATES = {State.START, State.HELLO, State.OPEN, State.CLOSED}
CLOSE_CODES = {1000, 1001, 1002, 1008, 1009, 1011, 1013}  # protocol.md section 8
FUZZ_SEEDS = fuzz.seeds()
MUTATOR = fuzz.Fuzzer(np.random.default_rng(0))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FUZZ_SEEDS), st.binary(max_size=80), st.text(max_size=80)), max_size=8),
       st.integers(0, 2**32 - 1))
def test_sessions_fed_any_sequence_end_in_a_documented_state(messages, seed):
    rng = MUTATOR.rng = np.random.default_rng(seed)
    for session in (CoordinatorSession("c"), DeviceSession()):
        if isinstance(session, DeviceSession):
            session.send_hello("d", runtime="torch")
        for message in messages:
            if rng.random() < 0.5:
                message = MUTATOR._bytes(message) if isinstance(message, bytes) else MUTATOR._structural(message)
            session.receive(message)  # never raises for the peer's input
            session.events_received(), session.data_to_send()
            assert session.state in SESSION_STATES
            if session.closed:
                assert session.websocket_close()[0] in CLOSE_CODES
                if session.failure is not None:
                    assert isinstance(session.failure, ProtocolError)
                    assert session.failure.code in fuzz.DOCUMENTED_CODES
        if session.closed:
            # Closed is final: whatever still arrives is dropped (protocol.md 5.9).
            session.receive(FUZZ_SEEDS[3])
            assert session.events_received() == [] and session.data_to_send() == []
