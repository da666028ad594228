package org.mjfl.client.net;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.Response;
import okhttp3.WebSocket;
import okhttp3.WebSocketListener;
import okio.ByteString;
import org.mjfl.client.protocol.Codes;
import org.mjfl.client.protocol.Credentials;
import org.mjfl.client.protocol.Parts;
import org.mjfl.client.protocol.Text;
import org.mjfl.client.session.DeviceSession;
import org.mjfl.client.session.Outgoing;
import org.mjfl.client.session.SessionEvent;

/**
 * Runs one {@link DeviceSession} over one OkHttp WebSocket (protocol.md section 11), like the
 * reference's connection runner: OkHttp's reader thread feeds every message to the session and
 * hands its events to a {@link Handler}; one writer thread is the only one that sends, draining
 * {@link DeviceSession#dataToSend()} in order and closing the WebSocket with the section 8 close
 * code once the session is closed; a timer sends heartbeats and notices a silent coordinator.
 *
 * <p>Writing follows section 4: binary messages over {@link Options#maxPartBytes} travel as
 * parts, with text messages (heartbeat acks) allowed between them, and each send first waits for
 * OkHttp's queue to fall below {@link Options#queueHighWater}, since OkHttp fails a WebSocket
 * whose queue passes 16 MiB. The time each result takes to drain (queue back to 0) is the next
 * result's {@code upload_s} (5.5).
 */
public final class Connection {
    private static final Logger LOG = Logger.getLogger(Connection.class.getName());

    /** Receives the session's events, on OkHttp's reader thread, in order; must not block long. */
    @FunctionalInterface
    public interface Handler {
        void onEvents(Connection connection, List<SessionEvent> events, double arrivedAt);
    }

    /**
     * Limits of one connection.
     *
     * @param maxPartBytes split binary messages larger than this (section 4: 8 MiB for OkHttp)
     * @param queueHighWater wait for OkHttp's queue to fall below this before each send
     * @param welcomeTimeoutS give up on a coordinator that has not welcomed us (section 11.2: 10 s)
     * @param closeTimeoutS after our close, drop the connection if the closing handshake stalls
     */
    public record Options(int maxPartBytes, long queueHighWater, double welcomeTimeoutS, double closeTimeoutS) {
        public static final Options DEFAULTS = new Options(8 << 20, 8 << 20, 10.0, 5.0);
    }

    /**
     * How a connection ended: the session's closure (null code: no bye was exchanged), whether it
     * had been welcomed, and the transport failure if there was one.
     */
    public record Ending(SessionEvent.Closed closure, boolean welcomed, Throwable failure) {}

    private final OkHttpClient http;
    private final String url;
    private final DeviceSession session;
    private final Handler handler;
    private final ScheduledExecutorService timers;
    private final Clock clock;
    private final Options options;

    private final Object lock = new Object(); // guards session and the fields below
    private final CountDownLatch ended = new CountDownLatch(1);
    private WebSocket ws;
    private boolean opened;
    private boolean welcomed;
    private boolean finished;
    private Throwable failure;
    private ScheduledFuture<?> ticker;
    private ScheduledFuture<?> welcomeTimer;
    private double uploadStart = Double.NaN; // a result being timed until OkHttp's queue drains
    private Double lastUploadS;

    public Connection(OkHttpClient http, String url, DeviceSession session, Handler handler,
            ScheduledExecutorService timers, Clock clock, Options options) {
        this.http = http;
        this.url = url;
        this.session = session;
        this.handler = handler;
        this.timers = timers;
        this.clock = clock;
        this.options = options;
    }

    /** Connects and serves the session until the connection ends. */
    public Ending run() throws InterruptedException {
        Thread writer = new Thread(this::writeLoop, "mjfl-writer-" + session.hello().deviceId());
        writer.setDaemon(true);
        synchronized (lock) {
            ws = http.newWebSocket(new Request.Builder().url(url).build(), new Listener());
            welcomeTimer = timers.schedule(this::checkWelcome, millis(options.welcomeTimeoutS()), TimeUnit.MILLISECONDS);
        }
        writer.start();
        try {
            ended.await();
        } finally {
            synchronized (lock) {
                cancelTimers();
                if (!finished) { // interrupted: leave without a word
                    ws.cancel();
                }
                lock.notifyAll();
            }
        }
        writer.join(TimeUnit.SECONDS.toMillis(5));
        synchronized (lock) {
            return new Ending(session.closure(), welcomed, failure);
        }
    }

    /** Runs {@code action} on the session under the connection's lock, then wakes the writer. */
    public void act(Consumer<DeviceSession> action) {
        synchronized (lock) {
            action.accept(session);
            lock.notifyAll();
        }
    }

    /** Ends the session with a bye (e.g. {@code going_away}) and closes. */
    public void stop(String code, String reason) {
        synchronized (lock) {
            if (!opened && ws != null) {
                session.abort(reason); // no handshake yet: nobody to say bye to
                ws.cancel();
            } else {
                session.close(code, reason);
            }
            lock.notifyAll();
        }
    }

    /**
     * How long the previous result took to drain (5.5 {@code upload_s}); null before the first.
     * If it is still draining, waits for it (bounded): OkHttp sends in order, so the next result
     * could not leave earlier anyway, and a poll that merely lost a race would report null.
     */
    public Double lastUploadS() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        synchronized (lock) {
            pollUpload();
            while (!Double.isNaN(uploadStart) && !finished && System.nanoTime() < deadline) {
                lock.wait(1);
                pollUpload();
            }
            return lastUploadS;
        }
    }

    // ----------------------------------------------------------------------------------------
    // Reader side: OkHttp's callbacks

    private final class Listener extends WebSocketListener {
        @Override
        public void onOpen(WebSocket webSocket, Response response) {
            act(s -> {
                opened = true;
                if (s.state() == DeviceSession.State.START) {
                    s.connect(response.header(Credentials.NONCE_HEADER));
                }
            });
        }

        @Override
        public void onMessage(WebSocket webSocket, String text) {
            double now = clock.now();
            List<SessionEvent> events;
            synchronized (lock) {
                events = session.receiveText(text, now);
                lock.notifyAll();
            }
            dispatch(events, now);
        }

        @Override
        public void onMessage(WebSocket webSocket, ByteString bytes) {
            double now = clock.now();
            List<SessionEvent> events;
            synchronized (lock) {
                events = session.receiveBinary(bytes.asByteBuffer(), now);
                lock.notifyAll();
            }
            dispatch(events, now);
        }

        @Override
        public void onClosing(WebSocket webSocket, int code, String reason) {
            synchronized (lock) {
                session.abort("the coordinator closed the WebSocket (" + code + ")");
                lock.notifyAll();
            }
            webSocket.close(code == 1005 || code == 1006 ? 1000 : code, null); // answer the closing handshake
        }

        @Override
        public void onClosed(WebSocket webSocket, int code, String reason) {
            finish(null);
        }

        @Override
        public void onFailure(WebSocket webSocket, Throwable t, Response response) {
            synchronized (lock) {
                session.abort("connection failed: " + t);
            }
            finish(t);
        }
    }

    private void dispatch(List<SessionEvent> events, double arrivedAt) {
        for (SessionEvent e : events) {
            if (e instanceof SessionEvent.Welcomed) {
                startHeartbeats((SessionEvent.Welcomed) e);
            }
        }
        if (!events.isEmpty()) {
            try {
                handler.onEvents(this, events, arrivedAt);
            } catch (RuntimeException ex) {
                LOG.log(Level.SEVERE, session.hello().deviceId() + ": event handler failed", ex);
                act(s -> s.close(Codes.INTERNAL_ERROR, "internal error"));
            }
        }
    }

    private void finish(Throwable t) {
        synchronized (lock) {
            if (finished) {
                return;
            }
            finished = true;
            failure = t;
            cancelTimers();
            lock.notifyAll();
        }
        ended.countDown();
    }

    // ----------------------------------------------------------------------------------------
    // Timers: no welcome in time, heartbeats (section 10)

    private void checkWelcome() {
        synchronized (lock) {
            if (session.state() == DeviceSession.State.START || session.state() == DeviceSession.State.HELLO) {
                if (opened) {
                    session.close(Codes.HEARTBEAT_TIMEOUT, "no welcome"); // section 11.2
                } else {
                    session.abort("no WebSocket handshake in time");
                    ws.cancel();
                }
                lock.notifyAll();
            }
        }
    }

    private void startHeartbeats(SessionEvent.Welcomed w) {
        Double interval = w.welcome().settings().heartbeatIntervalS();
        Double timeout = w.welcome().settings().heartbeatTimeoutS();
        synchronized (lock) {
            welcomed = true;
            if (welcomeTimer != null) {
                welcomeTimer.cancel(false);
            }
            if (interval == null && timeout == null) {
                return;
            }
            // Check often enough to heartbeat within a second of due and notice a dead peer within
            // a quarter of the timeout; no more often than every 50 ms.
            double period = Math.min(interval == null ? 1.0 : interval, timeout == null ? 1.0 : timeout / 4);
            long ms = Math.max(50, Math.min(1000, millis(period)));
            ticker = timers.scheduleAtFixedRate(this::tick, ms, ms, TimeUnit.MILLISECONDS);
        }
    }

    private void tick() {
        double now = clock.now();
        synchronized (lock) {
            if (session.isExpired(now)) {
                session.close(Codes.HEARTBEAT_TIMEOUT, "no message from the coordinator within heartbeat_timeout_s of a heartbeat");
            } else if (session.heartbeatDue(now)) {
                session.sendHeartbeat(now);
            }
            lock.notifyAll();
        }
    }

    private void cancelTimers() {
        if (ticker != null) {
            ticker.cancel(false);
        }
        if (welcomeTimer != null) {
            welcomeTimer.cancel(false);
        }
    }

    // ----------------------------------------------------------------------------------------
    // Writer

    private void writeLoop() {
        Deque<Outgoing> queue = new ArrayDeque<>();
        try {
            while (true) {
                boolean closed;
                synchronized (lock) {
                    queue.addAll(session.dataToSend());
                    while (queue.isEmpty() && session.state() != DeviceSession.State.CLOSED && !finished) {
                        lock.wait(Double.isNaN(uploadStart) ? 0 : 2); // poll OkHttp's queue while timing an upload
                        pollUpload();
                        queue.addAll(session.dataToSend());
                    }
                    if (finished) {
                        return;
                    }
                    closed = session.state() == DeviceSession.State.CLOSED;
                }
                if (!sendAll(queue)) {
                    closed = true; // a bye went out, or OkHttp refused: nothing more to send
                }
                if (closed) {
                    closeSocket();
                    return;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Sends the queue in order; false once a bye is sent or OkHttp refuses. */
    private boolean sendAll(Deque<Outgoing> queue) throws InterruptedException {
        while (!queue.isEmpty()) {
            Outgoing o = queue.pollFirst();
            if (o.isText()) {
                if (!sendText(o)) {
                    queue.clear();
                    return false;
                }
                continue;
            }
            boolean result = o.kind() == Outgoing.Kind.RESULT;
            double start = clock.now();
            List<ByteBuffer> parts = Parts.split(o.binary(), options.maxPartBytes());
            for (int i = 0; i < parts.size(); i++) {
                if (i > 0 && !sendTextsBetweenParts(queue)) {
                    queue.clear();
                    return false;
                }
                if (!awaitQueueBelow(options.queueHighWater()) || !ws.send(ByteString.of(parts.get(i)))) {
                    queue.clear();
                    return false;
                }
            }
            if (result) {
                synchronized (lock) {
                    uploadStart = start;
                }
            }
        }
        return true;
    }

    /** Section 4: text messages may go between parts (acks keep the session alive); binaries wait. */
    private boolean sendTextsBetweenParts(Deque<Outgoing> queue) throws InterruptedException {
        List<Outgoing> more;
        synchronized (lock) {
            more = session.dataToSend();
            pollUpload();
        }
        Deque<Outgoing> binaries = new ArrayDeque<>();
        for (Outgoing m : more) {
            if (!m.isText()) {
                binaries.add(m);
            } else if (!sendText(m)) {
                return false;
            }
        }
        while (!binaries.isEmpty()) {
            queue.addLast(binaries.pollFirst());
        }
        return true;
    }

    private boolean sendText(Outgoing o) throws InterruptedException {
        boolean ok = awaitQueueBelow(options.queueHighWater()) && ws.send(o.text());
        return ok && o.kind() != Outgoing.Kind.BYE;
    }

    /** OkHttp has no callback for a draining queue: poll it. */
    private boolean awaitQueueBelow(long bytes) throws InterruptedException {
        while (ws.queueSize() >= bytes) {
            synchronized (lock) {
                if (finished) {
                    return false;
                }
            }
            Thread.sleep(2);
        }
        return true;
    }

    /** Called under the lock: a timed result whose bytes have all left OkHttp's queue. */
    private void pollUpload() {
        if (!Double.isNaN(uploadStart) && ws.queueSize() == 0) {
            lastUploadS = clock.now() - uploadStart;
            uploadStart = Double.NaN;
        }
    }

    private void closeSocket() {
        int code;
        String reason;
        synchronized (lock) {
            code = session.closeCode();
            SessionEvent.Closed c = session.closure();
            reason = c == null || c.reason() == null ? "" : Text.cutUtf8(c.reason(), 123); // 5.9
            pollUpload();
        }
        ws.close(code, reason);
        timers.schedule(() -> {
            synchronized (lock) {
                if (!finished) {
                    ws.cancel(); // the peer never finished the closing handshake
                }
            }
        }, millis(options.closeTimeoutS()), TimeUnit.MILLISECONDS);
    }

    private static long millis(double seconds) {
        return (long) Math.ceil(seconds * 1000);
    }
}
