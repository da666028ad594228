package org.mjfl.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mjfl.client.session.Fixture.PROGRAM_SHA;
import static org.mjfl.client.session.Fixture.SHARD_SHA;
import static org.mjfl.client.session.Fixture.provision;
import static org.mjfl.client.session.Fixture.task;
import static org.mjfl.client.session.Fixture.weights;
import static org.mjfl.client.session.Fixture.wire;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import okhttp3.OkHttpClient;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.mjfl.client.cache.ArtifactCache;
import org.mjfl.client.net.Backoff;
import org.mjfl.client.net.Connection;
import org.mjfl.client.net.MiniWsServer;
import org.mjfl.client.net.MiniWsServer.Frame;
import org.mjfl.client.net.MiniWsServer.Peer;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Codes;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.session.Fixture;
import org.mjfl.client.train.StandInTrainer;
import org.mjfl.client.train.TaskRefusedException;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;

/**
 * The device over a real OkHttp WebSocket against an in-process server that plays the
 * coordinator by hand. Every wait is on a message (bounded), never a sleep.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DeviceLoopbackTest {
    static OkHttpClient http;
    static ScheduledExecutorService timers;

    @TempDir
    Path dir;
    MiniWsServer server;
    final List<Device> devices = new ArrayList<>();

    @BeforeAll
    static void client() {
        http = new OkHttpClient.Builder().readTimeout(java.time.Duration.ZERO).build();
        http.dispatcher().setMaxRequests(64);
        http.dispatcher().setMaxRequestsPerHost(64);
        timers = Executors.newScheduledThreadPool(1, r -> {
            Thread t = new Thread(r, "test-timers");
            t.setDaemon(true);
            return t;
        });
    }

    @AfterAll
    static void shutDown() {
        DeviceMain.shutDown(http, timers);
    }

    @BeforeEach
    void start() throws Exception {
        server = new MiniWsServer();
    }

    @AfterEach
    void stop() throws Exception {
        devices.forEach(Device::stop);
        server.close();
    }

    /** Backoff of 10 ms that records the attempts asked for. */
    static final class RecordingBackoff extends Backoff {
        final List<Integer> attempts = new ArrayList<>();

        RecordingBackoff() {
            super(0.01, 1, 0.01, 0, new Random(0));
        }

        @Override
        public synchronized double delay(int attempt) {
            attempts.add(attempt);
            return super.delay(attempt);
        }

        synchronized List<Integer> attempts() {
            return List.copyOf(attempts);
        }
    }

    final RecordingBackoff backoff = new RecordingBackoff();

    /** What the device told its listener, in order. */
    static final class RecordingListener implements DeviceListener {
        final List<String> events = new ArrayList<>();

        @Override
        public synchronized void welcomed(String coordinatorId) {
            events.add("welcomed " + coordinatorId);
        }

        @Override
        public synchronized void sessionEnded(String why) {
            events.add("ended");
        }

        @Override
        public synchronized void reconnecting(double delayS) {
            events.add("reconnecting");
        }

        @Override
        public synchronized void cannotTrain(String why) {
            events.add("cannot train: " + why);
        }

        synchronized List<String> events() {
            return List.copyOf(events);
        }
    }

    final RecordingListener listener = new RecordingListener();

    DeviceConfig.Builder config(Trainer trainer) throws Exception {
        return DeviceConfig.builder(server.url(), "dev-1", trainer, new ArtifactCache(dir.resolve("cache")))
                .backoff(backoff)
                .options(new Connection.Options(8 << 20, 8 << 20, 5.0, 1.0));
    }

    CompletableFuture<Device.Stop> run(DeviceConfig cfg) {
        Device d = new Device(cfg, http, timers);
        d.listen(listener);
        devices.add(d);
        CompletableFuture<Device.Stop> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                f.complete(d.run());
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        }, "test-device");
        t.setDaemon(true);
        t.start();
        return f;
    }

    static Device.Stop stopOf(CompletableFuture<Device.Stop> f) throws Exception {
        return f.get(MiniWsServer.WAIT_S, TimeUnit.SECONDS);
    }

    /** Accepts the device's connection, checks its hello, welcomes it. */
    static Peer welcomed(MiniWsServer server, Double interval, Double timeout) throws Exception {
        Peer p = server.accept();
        assertEquals("hello", p.nextMessage().type());
        p.sendText(Fixture.welcome(1, interval, timeout, null));
        return p;
    }

    // ----------------------------------------------------------------------------------------

    @Test
    void trainsTasksWithTheStandInAndReportsTiming() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = server.accept();
        Message.Hello hello = (Message.Hello) p.nextMessage();
        assertEquals("dev-1", hello.deviceId());
        assertEquals("executorch", hello.runtime());
        assertEquals(List.of(1), hello.versions());
        assertEquals("jvm", hello.hardware().get("model").getAsString());
        assertEquals(Runtime.getRuntime().availableProcessors(), hello.hardware().get("cores").getAsInt());
        assertEquals(List.of(), hello.cached());
        p.sendText(Fixture.welcome(1, null, null, null));
        p.sendBinary(wire(provision("j", true, true)));
        p.sendBinary(wire(task("t1", "j", 4, weights(1, -2))));

        Message.Result r1 = p.next(Message.Result.class);
        assertEquals("t1", r1.taskId());
        assertEquals(4, r1.round());
        assertEquals(3, r1.samples(), "samples = shard size");
        assertEquals(0.0, r1.meanLoss());
        float scale = (float) (1 - 1e-4 * 0.5);
        float[] w = r1.tensors().get(0).toFloats();
        assertEquals(1f * scale, w[0]);
        assertEquals(-2f * scale, w[1]);
        assertEquals(7, r1.tensors().get(1).toLongs()[0], "int64 state is returned unchanged");
        assertNull(r1.timing().uploadS(), "the session's first result has no previous upload");
        assertTrue(r1.timing().downloadS() >= 0 && r1.timing().computeS() >= 0);

        p.sendBinary(wire(task("t2", "j", 5, weights(3, 4))));
        Message.Result r2 = p.next(Message.Result.class);
        assertNotNull(r2.timing().uploadS(), "upload time of the previous result");
        assertTrue(r2.timing().uploadS() >= 0);

        p.sayBye(Codes.GOING_AWAY, "coordinator shutdown", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
        assertEquals(List.of(), backoff.attempts(), "no reconnect after the coordinator's going_away");
        assertEquals(2, devices.get(0).stats().results.get());
    }

    @Test
    void afterADroppedConnectionItReconnectsListingItsArtifacts() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        p.sendBinary(wire(task("t1", "j", 0, weights(1))));
        p.next(Message.Result.class);
        p.drop();

        Peer q = server.accept();
        Message.Hello hello = (Message.Hello) q.nextMessage();
        assertEquals(List.of(PROGRAM_SHA, SHARD_SHA).stream().sorted().toList(), hello.cached());
        q.sendText(Fixture.welcome(1, null, null, null));
        q.sendBinary(wire(provision("j", false, false)));
        q.sendBinary(wire(task("t2", "j", 1, weights(1))));
        assertEquals("t2", q.next(Message.Result.class).taskId());
        assertEquals(List.of(0), backoff.attempts());
        q.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
        String welcomed = "welcomed coord";
        assertEquals(List.of(welcomed, "ended", "reconnecting", welcomed, "ended"), listener.events());
    }

    @Test
    void anArtifactLostFromDiskIsMissingArtifact() throws Exception {
        ArtifactCache cache = new ArtifactCache(dir.resolve("cache"));
        cache.put(PROGRAM_SHA, ByteBuffer.wrap(Fixture.PROGRAM));
        cache.put(SHARD_SHA, ByteBuffer.wrap(Fixture.X_BYTES), ByteBuffer.wrap(Fixture.Y_BYTES));
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = server.accept();
        assertEquals(2, ((Message.Hello) p.nextMessage()).cached().size());
        Files.delete(cache.dir().resolve(SHARD_SHA));
        p.sendText(Fixture.welcome(1, null, null, null));
        p.sendBinary(wire(provision("j", false, false)));
        p.sendBinary(wire(task("t1", "j", 0, weights(1))));
        p.expectByeAndClose(Codes.MISSING_ARTIFACT, 1002);
        Peer q = server.accept();
        assertEquals(List.of(PROGRAM_SHA), ((Message.Hello) q.nextMessage()).cached(), "a true list this time");
        q.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void backoffAttemptsResetAfterAWelcomedSession() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        for (int i = 0; i < 2; i++) { // refused before any welcome
            Peer p = server.accept();
            p.nextMessage();
            p.drop();
        }
        Peer w = welcomed(server, null, null);
        w.sendText("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":0}");
        w.next(Message.HeartbeatAck.class); // the welcome has been processed
        w.drop();
        Peer last = server.accept();
        last.nextMessage();
        assertEquals(List.of(0, 1, 0), backoff.attempts());
        last.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void noWelcomeInTimeIsByeHeartbeatTimeoutThenBackoff() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer())
                .options(new Connection.Options(8 << 20, 8 << 20, 0.2, 1.0)).build());
        Peer p = server.accept();
        p.nextMessage();
        assertEquals("no welcome", p.expectByeAndClose(Codes.HEARTBEAT_TIMEOUT, 1011).reason());
        Peer q = server.accept();
        assertEquals("hello", q.nextMessage().type());
        assertEquals(List.of(0), backoff.attempts());
        q.sendText(Fixture.welcome(1, null, null, null));
        q.sayBye(Codes.NORMAL, "done", 1000);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void unauthorizedStopsWithoutReconnecting() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).token("wrong").build());
        Peer p = server.accept();
        assertEquals("wrong", ((Message.Hello) p.nextMessage()).token());
        p.sayBye(Codes.UNAUTHORIZED, "bad token", 1008);
        assertEquals(Device.Stop.REFUSED, stopOf(stop));
        assertEquals(List.of(), backoff.attempts());
    }

    @Test
    void aWelcomeForAVersionNotOfferedIsRefusedAndStops() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = server.accept();
        p.nextMessage();
        p.sendText(Fixture.welcome(2, null, null, null));
        p.expectByeAndClose(Codes.UNSUPPORTED_VERSION, 1002);
        assertEquals(Device.Stop.REFUSED, stopOf(stop));
        assertEquals(List.of(), backoff.attempts());
    }

    @Test
    void withoutStopOnByeAGoingAwayCoordinatorIsRetried() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).stopOnCoordinatorBye(false).build());
        welcomed(server, null, null).sayBye(Codes.GOING_AWAY, "replaced", 1001);
        Peer again = server.accept();
        assertEquals("hello", again.nextMessage().type());
        devices.get(0).stop();
        again.sendText(Fixture.welcome(1, null, null, null)); // may cross the device's bye: either way it stops
        assertEquals(Device.Stop.STOPPED, stopOf(stop));
    }

    @Test
    void stopSaysByeGoingAway() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = welcomed(server, null, null);
        p.sendText("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":0}");
        p.next(Message.HeartbeatAck.class);
        devices.get(0).stop();
        p.expectByeAndClose(Codes.GOING_AWAY, 1001);
        assertEquals(Device.Stop.STOPPED, stopOf(stop));
    }

    @Test
    void aProtocolViolationIsAByeWithItsCodeThenAReconnect() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = welcomed(server, null, null);
        p.sendText("{\"type\":\"gossip\"}");
        p.expectByeAndClose(Codes.UNKNOWN_TYPE, 1002);
        Peer q = welcomed(server, null, null);
        q.sendBinary(wire(task("t", "j", 0, weights(1))));
        q.expectByeAndClose(Codes.UNKNOWN_JOB, 1002);
        Peer r = welcomed(server, null, null);
        r.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
        assertEquals(List.of(0, 0), backoff.attempts(), "each was a welcomed session");
    }

    @Test
    void heartbeatsBothWays() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = welcomed(server, 0.05, 30.0);
        for (long seq = 1; seq <= 3; seq++) {
            Message.Heartbeat h = (Message.Heartbeat) p.nextMessage();
            assertEquals(seq, h.seq());
            p.sendText(Codec.encodeText(new Message.HeartbeatAck(h.seq(), h.sentAt())));
        }
        p.sendText("{\"type\":\"heartbeat\",\"seq\":9,\"sent_at\":3.25}");
        assertEquals(new Message.HeartbeatAck(9, 3.25), p.next(Message.HeartbeatAck.class));
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void aSilentCoordinatorIsHeartbeatTimeout() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).build());
        Peer p = welcomed(server, 0.05, 0.3);
        p.expectByeAndClose(Codes.HEARTBEAT_TIMEOUT, 1011);
        Peer q = welcomed(server, null, null);
        q.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    /** A trainer that waits, without sleeping, until the task is cancelled. */
    static final class UntilCancelled implements Trainer {
        final CountDownLatch started = new CountDownLatch(1);

        @Override
        public TrainingResult train(org.mjfl.client.train.TrainingTask task, java.util.function.BooleanSupplier cancelled) {
            started.countDown();
            while (!cancelled.getAsBoolean()) {
                Thread.onSpinWait();
            }
            throw new java.util.concurrent.CancellationException();
        }
    }

    @Test
    void oneTaskAtATimeAndCancelAnswersCancelled() throws Exception {
        UntilCancelled trainer = new UntilCancelled();
        CompletableFuture<Device.Stop> stop = run(config(trainer).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        p.sendBinary(wire(task("t1", "j", 0, weights(1))));
        assertTrue(trainer.started.await(MiniWsServer.WAIT_S, TimeUnit.SECONDS));
        p.sendBinary(wire(task("t2", "j", 0, weights(1))));
        assertEquals(new Message.ErrorMessage(Codes.BUSY, "the device trains one task at a time", "t2"),
                p.next(Message.ErrorMessage.class));
        p.sendText("{\"type\":\"cancel\",\"task_id\":\"t9\",\"reason\":\"never sent\"}");
        p.sendText("{\"type\":\"cancel\",\"task_id\":\"t1\",\"reason\":\"deadline passed\"}");
        Message.ErrorMessage e = p.next(Message.ErrorMessage.class);
        assertEquals(Codes.CANCELLED, e.code());
        assertEquals("t1", e.taskId());
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void trainingFailuresAreErrorsAndTheSessionGoesOn() throws Exception {
        Trainer trainer = (task, cancelled) -> {
            switch (task.taskId()) {
                case "raises":
                    throw new IllegalStateException("boom");
                case "asserts": // an Error that says nothing about the device: this task only
                    throw new AssertionError("a bug in the trainer");
                case "oom":
                    throw new OutOfMemoryError("Java heap space");
                case "nan":
                    return new TrainingResult(List.of(Tensor.ofFloats("fc.weight", new long[] {1}, new float[] {Float.NaN}),
                            task.weights().get(1)), 3, 0.1, 0.01);
                case "inf-loss":
                    return new TrainingResult(task.weights(), 3, Double.POSITIVE_INFINITY, 0.01);
                case "reshaped":
                    return new TrainingResult(weights(1, 2), 3, 0.1, 0.01);
                case "refused":
                    throw new TaskRefusedException("program needs 362 MB of planned memory; the phone has 210 MB available");
                case "late":
                    throw new java.util.concurrent.CancellationException("the deadline passed during training");
                default:
                    return new TrainingResult(task.weights(), 3, 0.1, 0.01);
            }
        };
        CompletableFuture<Device.Stop> stop = run(config(trainer).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        String[][] cases = {{"raises", Codes.TASK_FAILED}, {"asserts", Codes.TASK_FAILED}, {"oom", Codes.TASK_FAILED},
            {"nan", Codes.DIVERGED}, {"inf-loss", Codes.DIVERGED}, {"reshaped", Codes.TASK_FAILED},
            {"refused", Codes.TASK_FAILED}, {"late", Codes.CANCELLED}};
        Map<String, String> reasons = new HashMap<>();
        for (String[] c : cases) {
            p.sendBinary(wire(task(c[0], "j", 0, weights(1))));
            Message.ErrorMessage e = p.next(Message.ErrorMessage.class);
            assertEquals(c[0], e.taskId());
            assertEquals(c[1], e.code(), e.reason());
            reasons.put(c[0], e.reason());
        }
        // A refusal and a stop of the trainer's own say why; a bug's details stay in the log.
        assertEquals("program needs 362 MB of planned memory; the phone has 210 MB available", reasons.get("refused"));
        assertEquals("the deadline passed during training", reasons.get("late"));
        assertEquals("training raised IllegalStateException", reasons.get("raises"));
        p.sendBinary(wire(task("fine", "j", 0, weights(1))));
        assertEquals("fine", p.next(Message.Result.class).taskId());
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
        assertEquals(8, devices.get(0).stats().errors.get());
    }

    /** What reached the default uncaught-exception handler (on Android: a crash of the app). */
    static final class Uncaught implements AutoCloseable {
        final List<Throwable> seen = java.util.Collections.synchronizedList(new ArrayList<>());
        final Thread.UncaughtExceptionHandler before = Thread.getDefaultUncaughtExceptionHandler();

        Uncaught() {
            Thread.setDefaultUncaughtExceptionHandler((t, e) -> seen.add(e));
        }

        @Override
        public void close() {
            Thread.setDefaultUncaughtExceptionHandler(before);
        }
    }

    @Test
    void aTrainerThatCannotLoadAnswersTaskFailedThenSaysByeAndStops() throws Exception {
        Trainer trainer = (task, cancelled) -> {
            // What System.loadLibrary throws on a phone whose ABI the AAR has no library for.
            throw new UnsatisfiedLinkError("dlopen failed: library \"libexecutorch.so\" not found");
        };
        try (Uncaught uncaught = new Uncaught()) {
            CompletableFuture<Device.Stop> stop = run(config(trainer).build());
            Peer p = welcomed(server, null, null);
            p.sendBinary(wire(provision("j", true, true)));
            p.sendBinary(wire(task("t1", "j", 0, weights(1))));
            Message.ErrorMessage e = p.next(Message.ErrorMessage.class);
            String why = "the trainer cannot load on this device: UnsatisfiedLinkError: dlopen failed: library "
                    + "\"libexecutorch.so\" not found";
            assertEquals(new Message.ErrorMessage(Codes.TASK_FAILED, why, "t1"), e);
            Message.Bye bye = p.expectByeAndClose(Codes.GOING_AWAY, 1001);
            assertTrue(("cannot train: " + why).startsWith(bye.reason()), bye.reason());
            assertEquals(Device.Stop.CANNOT_TRAIN, stopOf(stop));
            assertEquals(List.of(), backoff.attempts(), "no reconnect: retrying cannot help");
            assertEquals(List.of("welcomed coord", "cannot train: " + why, "ended"), listener.events());
            assertEquals(List.of(), uncaught.seen, "nothing escaped the training thread");
        }
    }

    @Test
    void whyNoTaskCanTrainIsFoundInTheCausesToo() {
        assertEquals("the ExecuTorch runtime cannot load on this phone (armeabi-v7a)", Device.cannotTrainReason(
                new org.mjfl.client.train.CannotTrainException("the ExecuTorch runtime cannot load on this phone (armeabi-v7a)",
                        new UnsatisfiedLinkError("x"))));
        assertEquals("the trainer cannot load on this device: NoClassDefFoundError: org/pytorch/executorch/Module",
                Device.cannotTrainReason(new RuntimeException("wrapped",
                        new NoClassDefFoundError("org/pytorch/executorch/Module"))));
        assertTrue(Device.cannotTrainReason(new ExceptionInInitializerError(new IllegalStateException())) != null,
                "a class whose static initializer failed never loads");
        assertNull(Device.cannotTrainReason(new IllegalStateException("boom", new OutOfMemoryError())));
        assertNull(Device.cannotTrainReason(new AssertionError("a bug")));
    }

    /** A clock on which every reading is {@code step} seconds after the previous one. */
    static final class SteppingClock implements org.mjfl.client.net.Clock {
        volatile double step;
        private double now;

        @Override
        public synchronized double now() {
            now += step;
            return now;
        }
    }

    @Test
    void aTaskWhoseDeadlinePassedBeforeTrainingIsNotStartedAndAnswersCancelled() throws Exception {
        SteppingClock clock = new SteppingClock();
        List<Double> deadlines = java.util.Collections.synchronizedList(new ArrayList<>());
        Trainer trainer = (task, cancelled) -> {
            deadlines.add(task.deadlineAt());
            return new TrainingResult(task.weights(), 3, 0.1, 0.01);
        };
        CompletableFuture<Device.Stop> stop = run(config(trainer).clock(clock).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        // Loading the task's weights and data takes longer than its 30 s deadline_s.
        clock.step = 3600;
        p.sendBinary(wire(task("late", "j", 0, weights(1))));
        assertEquals(new Message.ErrorMessage(Codes.CANCELLED, "the deadline passed before training", "late"),
                p.next(Message.ErrorMessage.class));
        assertEquals(List.of(), deadlines, "the trainer was not called");
        clock.step = 0;
        p.sendBinary(wire(task("on-time", "j", 1, weights(1))));
        assertEquals("on-time", p.next(Message.Result.class).taskId());
        assertEquals(1, deadlines.size());
        assertTrue(Double.isFinite(deadlines.get(0)), "the trainer sees the task's deadline: " + deadlines);
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void theTrainerGetsTheTasksSeedOrOneTheDeviceDrew() throws Exception {
        // The drawn seeds' lines, at the level the app's logcat handler keeps (INFO).
        java.util.logging.Logger log = java.util.logging.Logger.getLogger(Device.class.getName());
        java.util.logging.Level was = log.getLevel();
        List<java.util.logging.LogRecord> lines = java.util.Collections.synchronizedList(new ArrayList<>());
        java.util.logging.Handler keep = new java.util.logging.Handler() {
            @Override
            public void publish(java.util.logging.LogRecord r) {
                if (r.getLevel().intValue() >= java.util.logging.Level.INFO.intValue()) {
                    lines.add(r);
                }
            }

            @Override
            public void flush() {}

            @Override
            public void close() {}
        };
        log.setLevel(java.util.logging.Level.INFO);
        log.addHandler(keep);
        try {
            trainWithAndWithoutSeeds(lines);
        } finally {
            log.removeHandler(keep);
            log.setLevel(was);
        }
    }

    private void trainWithAndWithoutSeeds(List<java.util.logging.LogRecord> lines) throws Exception {
        List<Long> seeds = java.util.Collections.synchronizedList(new ArrayList<>());
        Trainer trainer = (task, cancelled) -> {
            seeds.add(task.seed());
            return new TrainingResult(task.weights(), 3, 0.1, 0.01);
        };
        CompletableFuture<Device.Stop> stop = run(config(trainer).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        Message.Task plain = task("seeded", "j", 0, weights(1));
        p.sendBinary(wire(new Message.Task("seeded", "j", 0, plain.epochs(), plain.batchSize(), plain.lr(),
                plain.momentum(), plain.weightDecay(), plain.deadlineS(), PROGRAM_SHA, SHARD_SHA, Long.MAX_VALUE,
                plain.tensors())));
        assertEquals("seeded", p.next(Message.Result.class).taskId());
        for (String id : new String[] {"unseeded-1", "unseeded-2"}) {
            p.sendBinary(wire(task(id, "j", 0, weights(1))));
            assertEquals(id, p.next(Message.Result.class).taskId());
        }
        assertEquals(Long.MAX_VALUE, seeds.get(0));
        assertTrue(seeds.get(1) >= 0 && seeds.get(2) >= 0, seeds.toString());
        assertFalse(seeds.get(1).equals(seeds.get(2)), "each unseeded task draws its own: " + seeds);
        for (int i = 1; i <= 2; i++) {
            String want = "task unseeded-" + i + " carries no seed; the device drew " + seeds.get(i);
            assertTrue(lines.stream().anyMatch(r -> r.getMessage().endsWith(want)), want + " not logged at INFO");
        }
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    @Test
    void largeMessagesTravelInPartsBothWays() throws Exception {
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer())
                .options(new Connection.Options(4096, 8 << 20, 5.0, 1.0)).build());
        Peer p = welcomed(server, null, null);
        p.sendBinary(wire(provision("j", true, true)));
        float[] big = new float[5000];
        for (int i = 0; i < big.length; i++) {
            big[i] = i;
        }
        for (ByteBuffer part : org.mjfl.client.protocol.Parts.split(wire(task("t", "j", 0, weights(big))), 3000)) {
            p.sendBinary(part);
        }
        int binaries = 0;
        Message.Result r = null;
        while (r == null) {
            Frame f = p.next();
            assertEquals(Frame.BINARY, f.opcode());
            ByteBuffer b = ByteBuffer.wrap(f.payload()).order(ByteOrder.LITTLE_ENDIAN);
            assertTrue(f.payload().length <= 4096, "part of " + f.payload().length + " bytes");
            if (binaries == 0) {
                assertEquals(Codec.FLAG_MORE, b.getShort(6), "the first part says MORE");
            }
            binaries++;
            r = joinPart(f);
        }
        assertTrue(binaries >= 5);
        assertEquals(4999f * (float) (1 - 1e-4 * 0.5), r.tensors().get(0).toFloats()[4999]);
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }

    private final org.mjfl.client.protocol.Parts.Reassembler join = new org.mjfl.client.protocol.Parts.Reassembler(1, null, null);

    private Message.Result joinPart(Frame f) {
        ByteBuffer whole = join.feed(ByteBuffer.wrap(f.payload()));
        return whole == null ? null : (Message.Result) Codec.decodeBinary(whole, 1, null);
    }

    @Test
    void resultExtrasComeFromTheDevicesFacts() throws Exception {
        DeviceFacts facts = new DeviceFacts() {
            @Override
            public com.google.gson.JsonObject hardware() {
                com.google.gson.JsonObject h = new com.google.gson.JsonObject();
                h.addProperty("model", "Pixel 7");
                return h;
            }

            @Override
            public com.google.gson.JsonObject resultExtras(Message.Task task) {
                com.google.gson.JsonObject e = new com.google.gson.JsonObject();
                e.addProperty("battery_pct", 81);
                return e;
            }
        };
        CompletableFuture<Device.Stop> stop = run(config(new StandInTrainer()).facts(facts).build());
        Peer p = server.accept();
        assertEquals("Pixel 7", ((Message.Hello) p.nextMessage()).hardware().get("model").getAsString());
        p.sendText(Fixture.welcome(1, null, null, null));
        p.sendBinary(wire(provision("j", true, true)));
        p.sendBinary(wire(task("t", "j", 0, weights(1))));
        Frame f = p.next();
        String header = new String(f.payload(), 24, ByteBuffer.wrap(f.payload()).order(ByteOrder.LITTLE_ENDIAN).getInt(8),
                java.nio.charset.StandardCharsets.US_ASCII);
        assertTrue(header.contains("\"battery_pct\":81"), header);
        assertFalse(header.contains("NaN"));
        p.sayBye(Codes.GOING_AWAY, "done", 1001);
        assertEquals(Device.Stop.COORDINATOR_BYE, stopOf(stop));
    }
}
