package org.mjfl.client.session;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mjfl.client.session.Fixture.PROGRAM_SHA;
import static org.mjfl.client.session.Fixture.SHARD_SHA;
import static org.mjfl.client.session.Fixture.provision;
import static org.mjfl.client.session.Fixture.task;
import static org.mjfl.client.session.Fixture.weights;
import static org.mjfl.client.session.Fixture.wire;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Codes;
import org.mjfl.client.protocol.Frames;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Parts;
import org.mjfl.client.protocol.ProtocolException;
import org.mjfl.client.protocol.Tensor;

/** Section 7's device state machine and section 8's codes, one violation at a time. */
class DeviceSessionTest {
    static DeviceSession hello(List<String> cached) {
        DeviceSession s = new DeviceSession(Fixture.hello("dev", cached), 65536L);
        s.connect();
        return s;
    }

    static DeviceSession open(List<String> cached, Double interval, Double timeout, Long maxMessage) {
        DeviceSession s = hello(cached);
        s.dataToSend();
        List<SessionEvent> ev = s.receiveText(Fixture.welcome(1, interval, timeout, maxMessage), 0);
        assertInstanceOf(SessionEvent.Welcomed.class, ev.get(0));
        return s;
    }

    static DeviceSession open() {
        return open(List.of(), null, null, null);
    }

    /** A session with job "j" provisioned (artifacts sent). */
    static DeviceSession provisioned() {
        DeviceSession s = open();
        List<SessionEvent> ev = s.receiveBinary(wire(provision("j", true, true)), 0);
        assertInstanceOf(SessionEvent.Provisioned.class, ev.get(0), ev.toString());
        return s;
    }

    /** The session closed with a bye of this code, sent as the last message, and the right close code. */
    static void closedWith(DeviceSession s, List<SessionEvent> events, String code, int closeCode) {
        assertEquals(DeviceSession.State.CLOSED, s.state());
        SessionEvent.Closed c = (SessionEvent.Closed) events.get(events.size() - 1);
        assertEquals(code, c.code(), c.reason());
        assertFalse(c.byPeer());
        List<Outgoing> out = s.dataToSend();
        Outgoing last = out.get(out.size() - 1);
        assertEquals(Outgoing.Kind.BYE, last.kind());
        assertEquals(new Message.Bye(code, c.reason()), Codec.decodeText(last.text()));
        assertEquals(closeCode, s.closeCode());
    }

    static Message text(Outgoing o) {
        return Codec.decodeText(o.text());
    }

    // ----------------------------------------------------------------------------------------

    @Test
    void helloListsWhatTheDeviceHoldsThenWelcomeOpens() {
        DeviceSession s = new DeviceSession(Fixture.hello("dev", List.of(PROGRAM_SHA)), 65536L);
        assertEquals(DeviceSession.State.START, s.state());
        s.connect();
        assertEquals(DeviceSession.State.HELLO, s.state());
        Message.Hello h = (Message.Hello) text(s.dataToSend().get(0));
        assertEquals(List.of(PROGRAM_SHA), h.cached());
        assertEquals(List.of(1), h.versions());
        s.receiveText(Fixture.welcome(1, 10.0, 60.0, null), 0);
        assertEquals(DeviceSession.State.OPEN, s.state());
        assertEquals("coord", s.welcome().coordinatorId());
    }

    @Test
    void welcomeWithAVersionNotOfferedIsUnsupportedVersion() {
        DeviceSession s = hello(List.of());
        closedWith(s, s.receiveText(Fixture.welcome(2, null, null, null), 0), Codes.UNSUPPORTED_VERSION, 1002);
    }

    @Test
    void anythingButWelcomeOrByeBeforeTheWelcomeIsUnexpected() {
        DeviceSession s = hello(List.of());
        closedWith(s, s.receiveText("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":0}", 0), Codes.UNEXPECTED_MESSAGE, 1002);
        DeviceSession b = hello(List.of());
        closedWith(b, b.receiveBinary(wire(provision("j", true, true)), 0), Codes.UNEXPECTED_MESSAGE, 1002);
    }

    @Test
    void byeFromTheCoordinatorClosesWithoutAnswer() {
        DeviceSession s = hello(List.of());
        s.dataToSend();
        List<SessionEvent> ev = s.receiveText("{\"type\":\"bye\",\"code\":\"unauthorized\",\"reason\":\"bad token\"}", 0);
        assertEquals(new SessionEvent.Closed("unauthorized", "bad token", true), ev.get(0));
        assertTrue(s.dataToSend().isEmpty(), "nothing is sent after a bye");
        assertEquals(1008, s.closeCode());
        assertTrue(s.receiveText("{\"type\":\"gossip\"}", 1).isEmpty(), "CLOSED ignores everything");
    }

    @Test
    void wrongDirectionAndRepeatsAreUnexpected() {
        DeviceSession a = open();
        closedWith(a, a.receiveText(Fixture.welcome(1, null, null, null), 0), Codes.UNEXPECTED_MESSAGE, 1002);
        DeviceSession b = open();
        closedWith(b, b.receiveText(Codec.encodeText(Fixture.hello("x", List.of())), 0), Codes.UNEXPECTED_MESSAGE, 1002);
        DeviceSession c = open();
        Message.Result r = new Message.Result("t", "j", 0, 1, 0, new Message.Timing(0, 0, null), null, List.of());
        closedWith(c, c.receiveBinary(Codec.encodeBinary(r, 1), 0), Codes.UNEXPECTED_MESSAGE, 1002);
    }

    @Test
    void malformedUnknownAndOversizedMessages() {
        DeviceSession a = open();
        closedWith(a, a.receiveText("{\"type\":", 0), Codes.BAD_MESSAGE, 1002);
        DeviceSession b = open();
        closedWith(b, b.receiveText("{\"type\":\"gossip\"}", 0), Codes.UNKNOWN_TYPE, 1002);
        DeviceSession c = open();
        closedWith(c, c.receiveText("{\"type\":\"cancel\",\"task_id\":\"t\",\"reason\":\"" + "x".repeat(70_000) + "\"}", 0),
                Codes.MESSAGE_TOO_BIG, 1009);
        DeviceSession d = open();
        ByteBuffer big = wire(task("t", "j", 0, weights(new float[300_000])));
        closedWith(d, d.receiveBinary(big, 0), Codes.MESSAGE_TOO_BIG, 1009);
        DeviceSession e = open();
        closedWith(e, e.receiveBinary(ByteBuffer.wrap(new byte[10]), 0), Codes.BAD_FRAME, 1002);
    }

    @Test
    void provisionCarriesWhatIsMissingAndItMustVerify() {
        DeviceSession ok = open(List.of(PROGRAM_SHA), null, null, null);
        SessionEvent.Provisioned p = (SessionEvent.Provisioned) ok.receiveBinary(wire(provision("j", false, true)), 0).get(0);
        assertEquals(new JobBinding("j", Fixture.MODEL, PROGRAM_SHA, SHARD_SHA), p.job());
        assertTrue(ok.held().containsAll(List.of(PROGRAM_SHA, SHARD_SHA)));

        DeviceSession noProgram = open();
        closedWith(noProgram, noProgram.receiveBinary(wire(provision("j", false, true)), 0), Codes.MISSING_ARTIFACT, 1002);
        DeviceSession noShard = open();
        closedWith(noShard, noShard.receiveBinary(wire(provision("j", true, false)), 0), Codes.MISSING_ARTIFACT, 1002);
        DeviceSession badProgram = open();
        closedWith(badProgram, badProgram.receiveBinary(wire(provision("j", "other".getBytes(), Fixture.X_BYTES, Fixture.Y_BYTES)), 0),
                Codes.BAD_ARTIFACT, 1002);
        DeviceSession badShard = open();
        closedWith(badShard, badShard.receiveBinary(wire(provision("j", Fixture.PROGRAM, Frames.f32(new float[12]), Fixture.Y_BYTES)), 0),
                Codes.BAD_ARTIFACT, 1002);
        // Labels outside [0, num_classes) are refused by the codec (bad_message; GoldenFramesTest).
    }

    @Test
    void aProvisionForAProvisionedJobRebindsIt() {
        DeviceSession s = provisioned();
        byte[] x2 = Frames.f32(new float[12]);
        String shard2 = Frames.sha(Fixture.concat(x2, Fixture.Y_BYTES));
        Message.Provision again = new Message.Provision("j", Fixture.MODEL, PROGRAM_SHA, shard2,
                provision("j", null, x2, Fixture.Y_BYTES).tensors());
        s.receiveBinary(wire(again), 0);
        assertEquals(shard2, s.jobs().get("j").shardSha256());
        // A task naming the old shard: held, but no longer the job's.
        closedWith(s, s.receiveBinary(wire(task("t", "j", 0, weights(1))), 0), Codes.BAD_MESSAGE, 1002);
    }

    @Test
    void taskRulesInTheOrderOfSection72() {
        DeviceSession a = open(List.of(PROGRAM_SHA, SHARD_SHA), null, null, null);
        closedWith(a, a.receiveBinary(wire(task("t", "j", 0, weights(1))), 0), Codes.UNKNOWN_JOB, 1002);

        DeviceSession b = provisioned();
        Message.Task other = new Message.Task("t", "j", 0, 1, 1, 0, 0, 0, null, "c".repeat(64), SHARD_SHA, weights(1));
        closedWith(b, b.receiveBinary(wire(other), 0), Codes.MISSING_ARTIFACT, 1002);

        DeviceSession c = provisioned();
        assertInstanceOf(SessionEvent.TaskArrived.class, c.receiveBinary(wire(task("t", "j", 0, weights(1))), 0).get(0));
        closedWith(c, c.receiveBinary(wire(task("t", "j", 1, weights(1))), 0), Codes.BAD_MESSAGE, 1002);

        DeviceSession d = provisioned();
        ByteBuffer nan = wire(task("t", "j", 0, weights(1, 2)));
        int at = nan.order(java.nio.ByteOrder.LITTLE_ENDIAN).getInt(12) + 4;
        nan.putFloat(at, Float.NaN); // the encoder refuses NaN; the wire can still carry it
        closedWith(d, d.receiveBinary(nan, 0), Codes.BAD_WEIGHTS, 1002);
    }

    @Test
    void aTasksSeedArrivesWithItAndAnOutOfRangeOneIsBadMessage() {
        DeviceSession s = provisioned();
        Message.Task plain = task("t", "j", 0, weights(1));
        Message.Task seeded = new Message.Task("t", "j", 0, plain.epochs(), plain.batchSize(), plain.lr(),
                plain.momentum(), plain.weightDecay(), plain.deadlineS(), plain.programSha256(), plain.shardSha256(), 42L,
                plain.tensors());
        SessionEvent.TaskArrived t = (SessionEvent.TaskArrived) s.receiveBinary(wire(seeded), 0).get(0);
        assertEquals(42L, t.task().seed());
        assertTrue(s.sendError(Codes.BUSY, "busy", "t"));
        t = (SessionEvent.TaskArrived) s.receiveBinary(wire(plain), 0).get(0);
        assertNull(t.task().seed(), "a task from a coordinator that sends no seed is still a task");

        DeviceSession b = provisioned();
        ByteBuffer negative = wire(seeded);
        byte[] raw = Frames.bytes(negative);
        String header = new String(raw, java.nio.charset.StandardCharsets.ISO_8859_1);
        int at = header.indexOf("\"seed\":42") + "\"seed\":".length();
        raw[at] = '-';
        raw[at + 1] = '1';
        List<SessionEvent> events = b.receiveBinary(ByteBuffer.wrap(raw), 0);
        closedWith(b, events, Codes.BAD_MESSAGE, 1002);
        assertTrue(((SessionEvent.Closed) events.get(events.size() - 1)).reason().contains("seed"), events.toString());
    }

    @Test
    void aTaskIdMayBeReusedOnceAnswered() {
        DeviceSession s = provisioned();
        s.receiveBinary(wire(task("t", "j", 0, weights(1))), 0);
        assertTrue(s.sendError(Codes.BUSY, "busy", "t"));
        assertInstanceOf(SessionEvent.TaskArrived.class, s.receiveBinary(wire(task("t", "j", 1, weights(1))), 0).get(0));
    }

    @Test
    void resultAnswersThePendingTaskAndMustMatchIt() {
        DeviceSession s = provisioned();
        Message.Task t = ((SessionEvent.TaskArrived) s.receiveBinary(wire(task("t", "j", 4, weights(1, 2))), 0).get(0)).task();
        Message.Timing timing = new Message.Timing(0.1, 0.2, null);
        assertThrows(ProtocolException.class, () -> s.sendResult(new Message.Result("nope", "j", 4, 3, 0, timing, null, t.tensors())));
        assertEquals(Codes.BAD_MESSAGE, assertThrows(ProtocolException.class,
                () -> s.sendResult(new Message.Result("t", "j", 5, 3, 0, timing, null, t.tensors()))).code());
        assertEquals(Codes.BAD_WEIGHTS, assertThrows(ProtocolException.class,
                () -> s.sendResult(new Message.Result("t", "j", 4, 3, 0, timing, null, weights(1, 2, 3)))).code());
        assertEquals(Codes.BAD_WEIGHTS, assertThrows(ProtocolException.class,
                () -> s.sendResult(new Message.Result("t", "j", 4, 3, 0, timing, null, List.of(t.tensors().get(1), t.tensors().get(0))))).code());
        assertEquals(Codes.BAD_WEIGHTS, assertThrows(ProtocolException.class,
                () -> s.sendResult(new Message.Result("t", "j", 4, 3, 0, timing, null, weights(1, Float.NaN)))).code());
        assertTrue(s.dataToSend().isEmpty(), "nothing refused was queued");
        assertTrue(s.pendingTasks().containsKey("t"));

        assertTrue(s.sendResult(new Message.Result("t", "j", 4, 3, 0.5, timing, null, weights(3, 4))));
        Outgoing o = s.dataToSend().get(0);
        assertEquals(Outgoing.Kind.RESULT, o.kind());
        Message.Result back = (Message.Result) Codec.decodeBinary(o.binary(), 1, null);
        assertEquals(4, back.round());
        assertEquals(3f, back.tensors().get(0).toFloats()[0]);
        assertTrue(s.pendingTasks().isEmpty());
        assertEquals(Codes.UNKNOWN_TASK, assertThrows(ProtocolException.class,
                () -> s.sendError(Codes.TASK_FAILED, "late", "t")).code());
    }

    @Test
    void resultOverTheCoordinatorsLimitIsRefusedBeforeSending() {
        DeviceSession s = open(List.of(), null, null, 500L);
        s.receiveBinary(wire(provision("j", true, true)), 0);
        s.receiveBinary(wire(task("t", "j", 0, weights(new float[200]))), 0);
        assertEquals(Codes.MESSAGE_TOO_BIG, assertThrows(ProtocolException.class, () -> s.sendResult(
                new Message.Result("t", "j", 0, 3, 0, new Message.Timing(0, 0, null), null, weights(new float[200])))).code());
    }

    @Test
    void cancelReachesOnlyPendingTasks() {
        DeviceSession s = provisioned();
        s.receiveBinary(wire(task("t", "j", 0, weights(1))), 0);
        assertEquals(List.of(new SessionEvent.CancelRequested("t", "deadline")),
                s.receiveText("{\"type\":\"cancel\",\"task_id\":\"t\",\"reason\":\"deadline\"}", 0));
        assertTrue(s.pendingTasks().containsKey("t"), "a cancelled task is still pending until answered");
        s.sendError(Codes.CANCELLED, "cancelled", "t");
        assertTrue(s.receiveText("{\"type\":\"cancel\",\"task_id\":\"t\",\"reason\":\"crossed\"}", 0).isEmpty());
        assertEquals(DeviceSession.State.OPEN, s.state());
    }

    @Test
    void partsReassembleWithTextInBetween() {
        DeviceSession s = provisioned();
        List<ByteBuffer> parts = Parts.split(wire(task("t", "j", 0, weights(new float[1000]))), 1024);
        assertTrue(parts.size() > 3);
        List<SessionEvent> events = new ArrayList<>();
        for (int i = 0; i < parts.size(); i++) {
            events.addAll(s.receiveBinary(parts.get(i), 0));
            if (i == 1) {
                s.receiveText("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":5.5}", 0);
                assertEquals(new Message.HeartbeatAck(1, 5.5), text(s.dataToSend().get(0)), "acked between parts");
            }
            assertEquals(i == parts.size() - 1 ? 1 : 0, events.size());
        }
        assertInstanceOf(SessionEvent.TaskArrived.class, events.get(0));
    }

    // ----------------------------------------------------------------------------------------
    // Heartbeats, sections 5.7 and 10

    @Test
    void heartbeatsAreAckedAndTheirSeqMustIncrease() {
        DeviceSession s = open();
        s.receiveText("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":1712.5}", 0);
        s.receiveText("{\"type\":\"heartbeat\",\"seq\":5,\"sent_at\":3}", 0);
        List<Outgoing> out = s.dataToSend();
        assertEquals(new Message.HeartbeatAck(1, 1712.5), text(out.get(0)));
        assertEquals(new Message.HeartbeatAck(5, 3.0), text(out.get(1)));
        closedWith(s, s.receiveText("{\"type\":\"heartbeat\",\"seq\":5,\"sent_at\":3}", 0), Codes.BAD_MESSAGE, 1002);
    }

    @Test
    void acksAnswerOurHeartbeatsInOrderAndMaySkip() {
        DeviceSession never = open(List.of(), 1.0, null, null);
        closedWith(never, never.receiveText("{\"type\":\"heartbeat_ack\",\"seq\":1,\"echo\":0}", 0), Codes.BAD_MESSAGE, 1002);

        DeviceSession s = open(List.of(), 1.0, null, null);
        s.sendHeartbeat(1.0);
        s.sendHeartbeat(2.0);
        assertEquals(new Message.Heartbeat(1, 1.0), text(s.dataToSend().get(0)));
        assertEquals(List.of(new SessionEvent.HeartbeatAcked(1, 1.5)), s.receiveText("{\"type\":\"heartbeat_ack\",\"seq\":1,\"echo\":1.0}", 2.5));
        closedWith(s, s.receiveText("{\"type\":\"heartbeat_ack\",\"seq\":3,\"echo\":2.0}", 3), Codes.BAD_MESSAGE, 1002);

        // 5.7: an ack may skip older heartbeats, acknowledging them too; it never goes back.
        DeviceSession skip = open(List.of(), 1.0, null, null);
        skip.sendHeartbeat(1.0);
        skip.sendHeartbeat(2.0);
        assertEquals(List.of(new SessionEvent.HeartbeatAcked(2, 1.0)), skip.receiveText("{\"type\":\"heartbeat_ack\",\"seq\":2,\"echo\":2.0}", 3));
        closedWith(skip, skip.receiveText("{\"type\":\"heartbeat_ack\",\"seq\":1,\"echo\":1.0}", 3), Codes.BAD_MESSAGE, 1002);
    }

    @Test
    void heartbeatsFallDueEveryInterval() {
        DeviceSession s = open(List.of(), 10.0, 60.0, null); // welcomed at t = 0
        assertFalse(s.heartbeatDue(9.99));
        assertTrue(s.heartbeatDue(10.0));
        s.sendHeartbeat(10.5);
        assertFalse(s.heartbeatDue(20.4));
        assertTrue(s.heartbeatDue(20.5));
        DeviceSession off = open(List.of(), null, 60.0, null);
        assertFalse(off.heartbeatDue(1e9));
    }

    @Test
    void thePeerIsDeadATimeoutAfterAHeartbeatWithoutAnyMessage() {
        DeviceSession s = open(List.of(), 10.0, 60.0, null);
        assertFalse(s.isExpired(1000), "no heartbeat sent: nothing to time out");
        s.sendHeartbeat(10);
        s.sendHeartbeat(20);
        assertFalse(s.isExpired(69.9));
        assertTrue(s.isExpired(70), "60 s after the first unanswered heartbeat");
        s.receiveText("{\"type\":\"error\",\"code\":\"busy\",\"reason\":\"\",\"task_id\":null}", 71); // any message proves life
        assertFalse(s.isExpired(200));
        s.sendHeartbeat(300);
        assertFalse(s.isExpired(359));
        assertTrue(s.isExpired(360));
        DeviceSession noTimeout = open(List.of(), 10.0, null, null);
        noTimeout.sendHeartbeat(10);
        assertFalse(noTimeout.isExpired(1e9));
    }

    // ----------------------------------------------------------------------------------------

    @Test
    void closeSendsOneByeAndNothingAfter() {
        DeviceSession s = provisioned();
        s.receiveBinary(wire(task("t", "j", 0, weights(1))), 0);
        s.dataToSend();
        s.close(Codes.GOING_AWAY, "stopping");
        s.close(Codes.NORMAL, "again");
        assertFalse(s.sendError(Codes.CANCELLED, "x", "t"));
        assertFalse(s.sendResult(new Message.Result("t", "j", 0, 3, 0, new Message.Timing(0, 0, null), null, weights(1))));
        s.sendHeartbeat(5);
        List<Outgoing> out = s.dataToSend();
        assertEquals(1, out.size());
        assertEquals(new Message.Bye(Codes.GOING_AWAY, "stopping"), text(out.get(0)));
        assertEquals(1001, s.closeCode());
    }

    @Test
    void abortClosesWithoutABye() {
        DeviceSession s = open();
        s.sendHeartbeat(1);
        s.abort("connection lost");
        assertTrue(s.dataToSend().isEmpty());
        assertNull(s.closure().code());
        assertEquals(1000, s.closeCode());
    }

    @Test
    void closeCodesFollowSection8() {
        assertEquals(1000, Codes.closeCode("normal"));
        assertEquals(1001, Codes.closeCode("going_away"));
        assertEquals(1008, Codes.closeCode("unauthorized"));
        assertEquals(1009, Codes.closeCode("message_too_big"));
        assertEquals(1011, Codes.closeCode("heartbeat_timeout"));
        assertEquals(1011, Codes.closeCode("internal_error"));
        for (String c : List.of("unsupported_version", "bad_message", "unknown_type", "unexpected_message", "bad_frame",
                "bad_tensor_table", "bad_weights", "unknown_task", "unknown_job", "missing_artifact", "bad_artifact", "whatever")) {
            assertEquals(1002, Codes.closeCode(c), c);
        }
    }

    @Test
    void aHelloWithManyCachedArtifactsIsCutToFitTheDefaultControlLimit() {
        List<String> cached = new ArrayList<>();
        for (int i = 0; i < 4096; i++) {
            cached.add(Frames.sha(new byte[] {(byte) i, (byte) (i >> 8)}));
        }
        DeviceSession s = new DeviceSession(Fixture.hello("dev", cached), 65536L);
        s.connect();
        String hello = s.dataToSend().get(0).text();
        assertTrue(hello.length() <= DeviceSession.DEFAULT_CONTROL_BYTES, "hello of " + hello.length() + " bytes");
        List<String> listed = ((Message.Hello) Codec.decodeText(hello)).cached();
        assertTrue(listed.size() > 500 && cached.containsAll(listed));
        assertEquals(listed.size(), s.held().size(), "the session holds only what it listed");
    }

    @Test
    void tensorsOfATaskAreTheGlobalWeightsInOrder() {
        DeviceSession s = provisioned();
        SessionEvent.TaskArrived t = (SessionEvent.TaskArrived) s.receiveBinary(wire(task("t", "j", 0, weights(1, 2, 3))), 0).get(0);
        List<Tensor> w = t.task().tensors();
        assertEquals(List.of("fc.weight", "steps"), List.of(w.get(0).name(), w.get(1).name()));
        assertEquals(2f, w.get(0).toFloats()[1]);
        assertEquals(t.job(), s.jobs().get("j"));
    }
}
