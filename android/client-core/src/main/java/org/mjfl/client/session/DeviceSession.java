package org.mjfl.client.session;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Codes;
import org.mjfl.client.protocol.Credentials;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Parts;
import org.mjfl.client.protocol.ProtocolException;
import org.mjfl.client.protocol.Sha256;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.protocol.Text;

/**
 * The device side of one protocol v1 session (section 7), sans I/O: feed it what the WebSocket
 * delivers ({@link #receiveText}, {@link #receiveBinary}), act on the events it returns, and
 * send what {@link #dataToSend()} yields, in order. It never touches a socket or a clock: time
 * comes in as {@code now}, seconds on the caller's monotonic clock.
 *
 * <p>Every violation by the coordinator closes the session with a bye carrying the code of
 * section 8; the caller then closes the WebSocket with {@link #closeCode()}. Not thread-safe:
 * the caller serialises access.
 */
public final class DeviceSession {
    private static final Logger LOG = Logger.getLogger(DeviceSession.class.getName());

    public enum State { START, HELLO, OPEN, CLOSED }

    /** Section 9's default {@code max_control_bytes}: the coordinator's limit is unknown before the welcome. */
    public static final long DEFAULT_CONTROL_BYTES = 64 * 1024;

    private final Message.Hello hello;
    private final Long maxControlBytes;
    private final String secret;
    private final Set<String> held;
    private final Map<String, JobBinding> jobs = new LinkedHashMap<>();
    private final Map<String, Message.Task> pending = new LinkedHashMap<>();
    private final Deque<Outgoing> out = new ArrayDeque<>();
    private State state = State.START;
    private Message.Welcome welcome;
    private Parts.Reassembler parts;
    private SessionEvent.Closed closure;

    // Heartbeats, section 10.
    private long sentSeq;
    private final Deque<double[]> unacked = new ArrayDeque<>(); // {seq, sent_at}
    private long receivedSeq;
    private double nextHeartbeatAt;
    private double silentSince = Double.NaN; // our first heartbeat since the peer last spoke

    /**
     * @param hello the hello to send; its {@code cached} list is what the device holds, and its
     *     {@code max_message_bytes} the largest binary message accepted (message_too_big beyond)
     * @param maxControlBytes largest text message or JSON header accepted, or null for none
     */
    public DeviceSession(Message.Hello hello, Long maxControlBytes) {
        this(hello, maxControlBytes, null);
    }

    /** @param secret the device's enrolled secret, proved in the hello (5.1.1); null for none */
    public DeviceSession(Message.Hello hello, Long maxControlBytes, String secret) {
        this.hello = fitHello(hello);
        this.maxControlBytes = maxControlBytes;
        this.secret = secret;
        this.held = new HashSet<>(this.hello.cached());
    }

    /** The device speaks first (7.1): queues the hello, START -> HELLO. */
    public void connect() {
        connect(null);
    }

    /**
     * As {@link #connect()}, proving the secret over {@code nonce}: the handshake response's
     * {@link Credentials#NONCE_HEADER} (null or malformed: the hello goes without a proof).
     */
    public void connect(String nonce) {
        if (state != State.START) {
            throw new IllegalStateException("connect() in state " + state);
        }
        Message.Hello h = hello;
        if (secret != null && Credentials.isNonce(nonce)) {
            h = hello.withProof(Credentials.helloProof(secret, nonce, hello.deviceId()));
        } else if (secret != null) {
            LOG.warning(hello.deviceId() + ": the coordinator sent no " + Credentials.NONCE_HEADER
                    + ": cannot prove the secret");
        }
        out.add(Outgoing.text(Codec.encodeText(h)));
        state = State.HELLO;
    }

    // ----------------------------------------------------------------------------------------
    // Receiving

    public List<SessionEvent> receiveText(String text, double now) {
        if (state == State.CLOSED) {
            return List.of(); // 7.1: ignored
        }
        silentSince = Double.NaN; // any message proves the peer alive (section 10)
        if (maxControlBytes != null && Text.utf8Length(text) > maxControlBytes) {
            return fail(Codes.MESSAGE_TOO_BIG, "text message over " + maxControlBytes + " bytes");
        }
        try {
            return handle(Codec.decodeText(text), now);
        } catch (ProtocolException e) {
            return fail(e);
        }
    }

    public List<SessionEvent> receiveBinary(ByteBuffer data, double now) {
        if (state == State.CLOSED) {
            return List.of();
        }
        silentSince = Double.NaN;
        if (state != State.OPEN) {
            return fail(Codes.UNEXPECTED_MESSAGE, "binary message before the welcome"); // 7.1
        }
        try {
            ByteBuffer whole = parts.feed(data);
            if (whole == null) {
                return List.of();
            }
            return handle(Codec.decodeBinary(whole, welcome.version(), maxControlBytes), now);
        } catch (ProtocolException e) {
            return fail(e);
        }
    }

    private List<SessionEvent> handle(Message m, double now) {
        if (state == State.START) {
            return fail(Codes.UNEXPECTED_MESSAGE, "message before the hello"); // 7.1: the device speaks first
        }
        if (m instanceof Message.Bye) {
            Message.Bye bye = (Message.Bye) m;
            state = State.CLOSED;
            closure = new SessionEvent.Closed(bye.code(), bye.reason(), true);
            return List.of(closure);
        }
        if (state == State.HELLO) {
            if (m instanceof Message.Welcome) {
                return onWelcome((Message.Welcome) m, now);
            }
            return fail(Codes.UNEXPECTED_MESSAGE, m.type() + " before the welcome");
        }
        if (m instanceof Message.Provision) {
            return onProvision((Message.Provision) m);
        }
        if (m instanceof Message.Task) {
            return onTask((Message.Task) m);
        }
        if (m instanceof Message.Cancel) {
            Message.Cancel c = (Message.Cancel) m;
            // 5.6: a cancel for a task already answered is ignored (the messages crossed).
            return pending.containsKey(c.taskId())
                    ? List.of(new SessionEvent.CancelRequested(c.taskId(), c.reason()))
                    : List.of();
        }
        if (m instanceof Message.Heartbeat) {
            Message.Heartbeat h = (Message.Heartbeat) m;
            if (h.seq() <= receivedSeq) {
                return fail(Codes.BAD_MESSAGE, "heartbeat seq " + h.seq() + " after " + receivedSeq); // 7.2
            }
            receivedSeq = h.seq();
            out.add(Outgoing.text(Codec.encodeText(new Message.HeartbeatAck(h.seq(), h.sentAt()))));
            return List.of();
        }
        if (m instanceof Message.HeartbeatAck) {
            Message.HeartbeatAck a = (Message.HeartbeatAck) m;
            // 5.7: an ack answers a heartbeat sent and not yet acked, in order; it MAY skip older
            // ones (a peer that found several waiting answers the newest), which it acknowledges too.
            if (unacked.stream().noneMatch(h -> (long) h[0] == a.seq())) {
                return fail(Codes.BAD_MESSAGE, "heartbeat_ack " + a.seq() + " answers no unacked heartbeat");
            }
            double sentAt;
            do {
                double[] h = unacked.removeFirst();
                sentAt = h[1];
                if ((long) h[0] == a.seq()) {
                    break;
                }
            } while (true);
            return List.of(new SessionEvent.HeartbeatAcked(a.seq(), now - sentAt));
        }
        if (m instanceof Message.ErrorMessage) {
            return List.of(new SessionEvent.PeerError((Message.ErrorMessage) m));
        }
        // hello, welcome and result are valid messages in the wrong state or direction.
        return fail(Codes.UNEXPECTED_MESSAGE, m.type() + " is not for a device in an open session");
    }

    private List<SessionEvent> onWelcome(Message.Welcome w, double now) {
        if (!hello.versions().contains(w.version())) {
            return fail(Codes.UNSUPPORTED_VERSION, "welcome version " + w.version() + " was not offered"); // 5.2
        }
        welcome = w;
        state = State.OPEN;
        parts = new Parts.Reassembler(w.version(), hello.maxMessageBytes(), maxControlBytes);
        Double interval = w.settings().heartbeatIntervalS();
        nextHeartbeatAt = interval == null ? Double.POSITIVE_INFINITY : now + interval;
        return List.of(new SessionEvent.Welcomed(w));
    }

    /** 7.2: a provision omits only artifacts the device holds, and what it carries verifies. */
    private List<SessionEvent> onProvision(Message.Provision p) {
        Tensor program = p.tensor("program");
        Tensor x = p.tensor("x");
        Tensor y = p.tensor("y");
        if (program == null && !held.contains(p.programSha256())) {
            return fail(Codes.MISSING_ARTIFACT, "provision of " + p.jobId() + " omits a program the device does not hold");
        }
        if (x == null && !held.contains(p.shardSha256())) {
            return fail(Codes.MISSING_ARTIFACT, "provision of " + p.jobId() + " omits a shard the device does not hold");
        }
        if (program != null && !Sha256.of(program.data()).equals(p.programSha256())) {
            return fail(Codes.BAD_ARTIFACT, "program does not match program_sha256");
        }
        if (x != null) {
            if (!Sha256.of(x.data(), y.data()).equals(p.shardSha256())) {
                return fail(Codes.BAD_ARTIFACT, "x and y do not match shard_sha256");
            }
        }
        if (program != null) {
            held.add(p.programSha256());
        }
        if (x != null) {
            held.add(p.shardSha256());
        }
        JobBinding job = new JobBinding(p.jobId(), p.model(), p.programSha256(), p.shardSha256());
        jobs.put(p.jobId(), job); // a provision for a provisioned job rebinds it
        return List.of(new SessionEvent.Provisioned(p, job));
    }

    /** 7.2, device rules for a task, in the order the spec lists them. */
    private List<SessionEvent> onTask(Message.Task t) {
        JobBinding job = jobs.get(t.jobId());
        if (job == null) {
            return fail(Codes.UNKNOWN_JOB, "task for job " + t.jobId() + ", not provisioned in this session");
        }
        if (!held.contains(t.programSha256()) || !held.contains(t.shardSha256())) {
            return fail(Codes.MISSING_ARTIFACT, "task names an artifact the device does not hold");
        }
        if (!t.programSha256().equals(job.programSha256()) || !t.shardSha256().equals(job.shardSha256())) {
            return fail(Codes.BAD_MESSAGE, "task names artifacts that are not job " + t.jobId() + "'s");
        }
        if (pending.containsKey(t.taskId())) {
            return fail(Codes.BAD_MESSAGE, "task id " + t.taskId() + " is already pending");
        }
        for (Tensor w : t.tensors()) {
            if (!w.allFinite()) {
                return fail(Codes.BAD_WEIGHTS, "weights " + w.name() + " hold NaN or infinite values");
            }
        }
        pending.put(t.taskId(), t);
        return List.of(new SessionEvent.TaskArrived(t, job));
    }

    // ----------------------------------------------------------------------------------------
    // Sending

    /**
     * Answers a pending task with its result. Refuses (ProtocolException with the code the
     * coordinator would close with, nothing queued) a result the coordinator would refuse:
     * unknown_task, bad_message (job or round), bad_weights (names, dtypes, shapes, order, NaN),
     * message_too_big (over the welcome's limits).
     *
     * @return false if the session is no longer open (nothing is sent)
     */
    public boolean sendResult(Message.Result r) {
        if (state != State.OPEN) {
            return false;
        }
        Message.Task t = pending.get(r.taskId());
        if (t == null) {
            throw new ProtocolException(Codes.UNKNOWN_TASK, "result for task " + r.taskId() + ", not pending");
        }
        if (!t.jobId().equals(r.jobId()) || t.round() != r.round()) {
            throw new ProtocolException(Codes.BAD_MESSAGE, "result job or round differ from the task's");
        }
        List<Tensor> want = t.tensors();
        List<Tensor> got = r.tensors();
        if (want.size() != got.size()) {
            throw new ProtocolException(Codes.BAD_WEIGHTS, got.size() + " tensors, the task has " + want.size());
        }
        for (int i = 0; i < want.size(); i++) {
            if (!want.get(i).sameSpec(got.get(i))) {
                throw new ProtocolException(Codes.BAD_WEIGHTS, "tensor " + i + " is " + got.get(i) + ", the task's " + want.get(i));
            }
        }
        ByteBuffer bytes = Codec.encodeBinary(r, welcome.version()); // bad_weights on NaN/inf
        Message.Settings s = welcome.settings();
        if (s.maxMessageBytes() != null && bytes.remaining() > s.maxMessageBytes()) {
            throw new ProtocolException(Codes.MESSAGE_TOO_BIG, "result of " + bytes.remaining()
                    + " bytes, the coordinator accepts " + s.maxMessageBytes());
        }
        long headerLen = bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN).getInt(8) & 0xffffffffL;
        if (s.maxControlBytes() != null && headerLen > s.maxControlBytes()) {
            throw new ProtocolException(Codes.MESSAGE_TOO_BIG, "result header over max_control_bytes");
        }
        pending.remove(r.taskId());
        out.add(new Outgoing(Outgoing.Kind.RESULT, null, bytes));
        return true;
    }

    /**
     * Sends an error (5.8); with a task id it answers that pending task (unknown_task if none).
     *
     * @return false if the session is no longer open
     */
    public boolean sendError(String code, String reason, String taskId) {
        if (state != State.OPEN) {
            return false;
        }
        if (taskId != null && !pending.containsKey(taskId)) {
            throw new ProtocolException(Codes.UNKNOWN_TASK, "error for task " + taskId + ", not pending");
        }
        out.add(Outgoing.text(Codec.encodeText(new Message.ErrorMessage(code, Text.cutChars(reason, 1024), taskId))));
        if (taskId != null) {
            pending.remove(taskId);
        }
        return true;
    }

    /** Ends the session with a bye (5.9); nothing is sent after it. No-op once closed. */
    public void close(String code, String reason) {
        if (state == State.CLOSED) {
            return;
        }
        String r = Text.cutChars(reason, 1024);
        if (state != State.START) {
            out.add(new Outgoing(Outgoing.Kind.BYE, Codec.encodeText(new Message.Bye(code, r)), null));
        }
        state = State.CLOSED;
        closure = new SessionEvent.Closed(code, r, false);
    }

    /** The connection went without a bye: CLOSED, nothing more to send. */
    public void abort(String reason) {
        if (state == State.CLOSED) {
            return;
        }
        out.clear();
        state = State.CLOSED;
        closure = new SessionEvent.Closed(null, reason, false);
    }

    /** Messages to send, in order; each is one whole message (the writer may split binaries, section 4). */
    public List<Outgoing> dataToSend() {
        List<Outgoing> list = new ArrayList<>(out);
        out.clear();
        return list;
    }

    // ----------------------------------------------------------------------------------------
    // Liveness, section 10

    /** A heartbeat is due: open, the welcome set an interval, and it has passed. */
    public boolean heartbeatDue(double now) {
        return state == State.OPEN && now >= nextHeartbeatAt;
    }

    /** Queues heartbeat {seq, sent_at: now}; the next is due an interval later. */
    public void sendHeartbeat(double now) {
        if (state != State.OPEN) {
            return;
        }
        long seq = ++sentSeq;
        out.add(Outgoing.text(Codec.encodeText(new Message.Heartbeat(seq, now))));
        unacked.addLast(new double[] {seq, now});
        Double interval = welcome.settings().heartbeatIntervalS();
        nextHeartbeatAt = interval == null ? Double.POSITIVE_INFINITY : now + interval;
        if (Double.isNaN(silentSince)) {
            silentSince = now;
        }
    }

    /**
     * The coordinator is dead: a heartbeat has gone heartbeat_timeout_s without any message
     * back (section 10). The caller then says {@code close(heartbeat_timeout, ...)}.
     */
    public boolean isExpired(double now) {
        if (state != State.OPEN || Double.isNaN(silentSince)) {
            return false;
        }
        Double timeout = welcome.settings().heartbeatTimeoutS();
        return timeout != null && now - silentSince >= timeout;
    }

    // ----------------------------------------------------------------------------------------

    public State state() {
        return state;
    }

    /** The welcome, once OPEN; else null. */
    public Message.Welcome welcome() {
        return welcome;
    }

    public Message.Hello hello() {
        return hello;
    }

    /** Why the session closed, once CLOSED; else null. */
    public SessionEvent.Closed closure() {
        return closure;
    }

    /** The WebSocket close code for how the session ended (section 8); 1000 without a bye. */
    public int closeCode() {
        return closure == null || closure.code() == null ? 1000 : Codes.closeCode(closure.code());
    }

    public Map<String, JobBinding> jobs() {
        return Collections.unmodifiableMap(jobs);
    }

    public Map<String, Message.Task> pendingTasks() {
        return Collections.unmodifiableMap(pending);
    }

    /** Artifacts the device holds in this session: the hello's list and what provisions brought. */
    public Set<String> held() {
        return Collections.unmodifiableSet(held);
    }

    private List<SessionEvent> fail(ProtocolException e) {
        if (Codes.INTERNAL_ERROR.equals(e.code())) {
            // A bug of ours: details go to the log, the peer hears only "internal error" (section 8).
            LOG.log(Level.SEVERE, hello.deviceId() + ": internal error while receiving", e.getCause());
            return fail(e.code(), "internal error");
        }
        return fail(e.code(), e.reason());
    }

    private List<SessionEvent> fail(String code, String reason) {
        close(code, reason);
        return List.of(closure);
    }

    /**
     * The coordinator's {@code max_control_bytes} is unknown before the welcome (default 64
     * KiB), yet {@code cached} may list 4096 hashes (~280 KB). Listing fewer is safe (the
     * coordinator resends what is not listed), so the list is cut to fit the default.
     */
    private static Message.Hello fitHello(Message.Hello h) {
        List<String> cached = h.cached();
        while (!cached.isEmpty() && Text.utf8Length(Codec.encodeText(withCached(h, cached))) > DEFAULT_CONTROL_BYTES) {
            cached = cached.subList(0, cached.size() * 3 / 4);
        }
        return withCached(h, cached);
    }

    private static Message.Hello withCached(Message.Hello h, List<String> cached) {
        return new Message.Hello(h.deviceId(), h.token(), h.runtime(), h.versions(), h.hardware(), cached,
                h.maxMessageBytes(), h.proof());
    }
}
