package org.mjfl.client;

import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;
import okhttp3.OkHttpClient;
import org.mjfl.client.net.Connection;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Codes;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.ProtocolException;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.session.DeviceSession;
import org.mjfl.client.session.JobBinding;
import org.mjfl.client.session.SessionEvent;
import org.mjfl.client.train.CannotTrainException;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TaskRefusedException;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * One device (testbed.md section 3, protocol.md section 11): connects, says hello with its
 * cached artifacts, stores what provisions bring, trains one task at a time with its
 * {@link org.mjfl.client.train.Trainer} and answers each with a result or an error, and
 * reconnects with backoff after a lost connection, a protocol error or a heartbeat timeout.
 *
 * <p>It stops on {@link #stop()} (bye {@code going_away}), on the coordinator's bye
 * {@code going_away}/{@code normal} when so configured, on {@code unauthorized} or
 * {@code unsupported_version}, where retrying cannot help, and when no task can ever train here
 * (see {@link Stop#CANNOT_TRAIN}).
 *
 * <p>Nothing a trainer throws escapes the training thread (on Android an uncaught throwable on
 * any thread kills the app): every throwable answers its task with an {@code error} (5.8).
 */
public final class Device {
    private static final Logger LOG = Logger.getLogger(Device.class.getName());
    private static final DeviceListener NO_LISTENER = new DeviceListener() {};
    private volatile DeviceListener listener = NO_LISTENER;
    private static final int SHARDS_IN_MEMORY = 4;

    /** Why {@link #run()} returned. */
    public enum Stop {
        STOPPED,
        COORDINATOR_BYE,
        REFUSED,
        /**
         * The trainer threw a {@link LinkageError} (its native runtime cannot load: e.g. a 32-bit
         * phone, where the ExecuTorch AAR ships no library) or a {@link CannotTrainException}:
         * no task can ever train here. The device answered that task {@code error task_failed}
         * with the reason, told its listener ({@link DeviceListener#cannotTrain}), said bye
         * {@code going_away} with the reason, and does not reconnect.
         *
         * <p>Why leave rather than keep the session and fail every task at once: retrying cannot
         * help (as with {@code unauthorized}); a device that stays is scheduled again and again by
         * a coordinator that sees only {@code task_failed}, each time taking a place in a round;
         * the bye puts the reason once in the coordinator's log ("device said bye going_away:
         * ..."), and the phone can stop its service and sleep.
         */
        CANNOT_TRAIN
    }

    /** Counters for a summary; read while running from any thread. */
    public static final class Stats {
        public final AtomicLong sessions = new AtomicLong();
        public final AtomicLong welcomed = new AtomicLong();
        public final AtomicLong results = new AtomicLong();
        public final AtomicLong errors = new AtomicLong();

        @Override
        public String toString() {
            return sessions + " sessions (" + welcomed + " welcomed), " + results + " results, " + errors + " errors";
        }
    }

    private final DeviceConfig cfg;
    private final OkHttpClient http;
    private final ScheduledExecutorService timers;
    private final ExecutorService trainingThread;
    private final Stats stats = new Stats();
    private final AtomicReference<Training> training = new AtomicReference<>();
    private final AtomicReference<String> cannotTrain = new AtomicReference<>(); // why, once known
    private boolean saidCannotTrain; // on the training thread only
    private final Map<String, Shard> shards = new LinkedHashMap<>(8, 0.75f, true); // LRU, guarded by itself
    private final Object stopSignal = new Object();
    private volatile boolean stopping;
    private volatile Connection current;

    /** A task being trained: one at a time (testbed.md section 3). */
    private static final class Training {
        final String taskId;
        volatile boolean cancelled;

        Training(String taskId) {
            this.taskId = taskId;
        }
    }

    /**
     * @param http shared by the devices of a process; its dispatcher must allow one running call
     *     per device (OkHttp reads each WebSocket on a dispatcher thread)
     * @param timers shared timers for welcome timeouts and heartbeats
     */
    public Device(DeviceConfig cfg, OkHttpClient http, ScheduledExecutorService timers) {
        this.cfg = cfg;
        this.http = http;
        this.timers = timers;
        this.trainingThread = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "mjfl-train-" + cfg.deviceId());
            t.setDaemon(true);
            return t;
        });
    }

    public String id() {
        return cfg.deviceId();
    }

    /** Tells {@code l} of the connection's ups and downs from now on (one listener; null for none). */
    public void listen(DeviceListener l) {
        listener = l == null ? NO_LISTENER : l;
    }

    public Stats stats() {
        return stats;
    }

    /** Serves sessions until the device stops; see the class comment for when. */
    public Stop run() throws InterruptedException {
        try {
            int attempt = 0;
            while (!stopping) {
                Connection c = new Connection(http, cfg.url(), newSession(), this::onEvents, timers, cfg.clock(),
                        cfg.options());
                current = c;
                if (stopping) { // stop() came between the check and current: it missed this connection
                    c.stop(Codes.GOING_AWAY, "device stopping");
                }
                stats.sessions.incrementAndGet();
                Connection.Ending end = c.run();
                current = null;
                cancelTraining();
                if (end.welcomed()) {
                    stats.welcomed.incrementAndGet();
                    attempt = 0; // testbed.md section 3: reset by every welcomed session
                }
                String why = describe(end);
                LOG.info(id() + ": session ended: " + why);
                listener.sessionEnded(why);
                if (stopping) {
                    return Stop.STOPPED;
                }
                Stop stop = stopsDevice(end);
                if (stop != null) {
                    return stop;
                }
                double delay = cfg.backoff().delay(attempt++);
                LOG.info(id() + String.format(": reconnecting in %.2f s", delay));
                listener.reconnecting(delay);
                synchronized (stopSignal) {
                    if (!stopping) {
                        stopSignal.wait(Math.max(1, (long) (delay * 1000)));
                    }
                }
            }
            return Stop.STOPPED;
        } finally {
            trainingThread.shutdownNow();
        }
    }

    /** Says bye {@code going_away} and stops; returns at once ({@link #run()} returns soon after). */
    public void stop() {
        stopping = true;
        Connection c = current;
        if (c != null) {
            c.stop(Codes.GOING_AWAY, "device stopping");
        }
        cancelTraining();
        synchronized (stopSignal) {
            stopSignal.notifyAll();
        }
    }

    private Stop stopsDevice(Connection.Ending end) {
        if (cannotTrain.get() != null) {
            return Stop.CANNOT_TRAIN; // reconnecting cannot help
        }
        SessionEvent.Closed c = end.closure();
        if (c == null || c.code() == null) {
            return null;
        }
        if (c.code().equals(Codes.UNAUTHORIZED) || c.code().equals(Codes.UNSUPPORTED_VERSION)) {
            return Stop.REFUSED; // either side: retrying cannot help
        }
        if (c.byPeer() && cfg.stopOnCoordinatorBye()
                && (c.code().equals(Codes.GOING_AWAY) || c.code().equals(Codes.NORMAL))) {
            return Stop.COORDINATOR_BYE;
        }
        return null;
    }

    private DeviceSession newSession() {
        List<String> cached;
        try {
            cached = cfg.cache().list();
        } catch (IOException e) {
            LOG.log(Level.WARNING, id() + ": cannot list the artifact cache; saying none", e);
            cached = List.of();
        }
        Message.Hello hello = new Message.Hello(cfg.deviceId(), cfg.token(), cfg.runtime(), List.of(Codec.VERSION),
                cfg.facts().hardware(), cached, cfg.maxMessageBytes());
        return new DeviceSession(hello, cfg.maxControlBytes(), cfg.secret());
    }

    // ----------------------------------------------------------------------------------------
    // Events, on OkHttp's reader thread

    private void onEvents(Connection c, List<SessionEvent> events, double arrivedAt) {
        for (SessionEvent e : events) {
            if (e instanceof SessionEvent.Welcomed) {
                String coordinator = ((SessionEvent.Welcomed) e).welcome().coordinatorId();
                LOG.info(id() + ": welcomed by " + coordinator);
                listener.welcomed(coordinator);
            } else if (e instanceof SessionEvent.Provisioned) {
                store(c, (SessionEvent.Provisioned) e);
            } else if (e instanceof SessionEvent.TaskArrived) {
                SessionEvent.TaskArrived t = (SessionEvent.TaskArrived) e;
                startTraining(c, t.task(), t.job(), arrivedAt);
            } else if (e instanceof SessionEvent.CancelRequested) {
                Training t = training.get();
                if (t != null && t.taskId.equals(((SessionEvent.CancelRequested) e).taskId())) {
                    t.cancelled = true;
                }
            } else if (e instanceof SessionEvent.HeartbeatAcked) {
                SessionEvent.HeartbeatAcked h = (SessionEvent.HeartbeatAcked) e;
                LOG.fine(() -> id() + String.format(": heartbeat %d round trip %.1f ms", h.seq(), h.rttS() * 1000));
            } else if (e instanceof SessionEvent.PeerError) {
                Message.ErrorMessage m = ((SessionEvent.PeerError) e).error();
                LOG.info(id() + ": coordinator reports " + m.code() + ": " + m.reason());
            } else if (e instanceof SessionEvent.Closed) {
                SessionEvent.Closed cl = (SessionEvent.Closed) e;
                LOG.info(id() + (cl.byPeer() ? ": coordinator says bye " : ": closing with bye ") + cl.code() + ": " + cl.reason());
            }
        }
    }

    /** Section 6: artifacts are kept by sha256 across sessions. */
    private void store(Connection c, SessionEvent.Provisioned p) {
        Message.Provision prov = p.provision();
        try {
            Tensor program = prov.tensor("program");
            if (program != null) {
                cfg.cache().put(prov.programSha256(), program.data());
            }
            Tensor x = prov.tensor("x");
            Tensor y = prov.tensor("y");
            if (x != null) {
                cfg.cache().put(prov.shardSha256(), x.data(), y.data());
                synchronized (shards) {
                    remember(prov.shardSha256(), Shard.fromTensors(x, y, prov.model()));
                }
            }
        } catch (IOException | RuntimeException | OutOfMemoryError e) { // none may escape OkHttp's reader thread
            LOG.log(Level.SEVERE, id() + ": cannot store the artifacts of job " + prov.jobId(), e);
            c.act(s -> s.close(Codes.INTERNAL_ERROR, "internal error"));
        }
    }

    private void remember(String sha, Shard shard) {
        shards.put(sha, shard);
        while (shards.size() > SHARDS_IN_MEMORY) {
            shards.remove(shards.keySet().iterator().next());
        }
    }

    /** The job's shard: in memory, else from the cache (verified); null if the device lost it. */
    private Shard shard(JobBinding job) {
        synchronized (shards) {
            Shard s = shards.get(job.shardSha256());
            if (s != null) {
                return s;
            }
        }
        try {
            Shard s = cfg.cache().load(job.shardSha256()).map(b -> Shard.fromArtifact(b, job.model())).orElse(null);
            if (s != null) {
                synchronized (shards) {
                    remember(job.shardSha256(), s);
                }
            }
            return s;
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    // ----------------------------------------------------------------------------------------
    // Training, one task at a time

    private void startTraining(Connection c, Message.Task task, JobBinding job, double arrivedAt) {
        String never = cannotTrain.get();
        if (never != null) { // a task that crossed our bye: answered at once, the same way
            c.act(error(Codes.TASK_FAILED, never, task.taskId()));
            return;
        }
        Training t = new Training(task.taskId());
        if (!training.compareAndSet(null, t)) {
            c.act(error(Codes.BUSY, "the device trains one task at a time", task.taskId()));
            return;
        }
        trainingThread.execute(() -> {
            Consumer<DeviceSession> answer;
            try {
                answer = train(c, t, task, job, arrivedAt);
            } catch (Throwable e) { // never let it reach the thread's handler: on Android that is a crash
                answer = failed(t, task.taskId(), e);
            }
            // Free the slot before answering: the coordinator may send the next task as soon
            // as it reads the answer, and must not be told busy.
            training.compareAndSet(t, null);
            try {
                if (answer != null) {
                    c.act(answer);
                }
                giveUpIfCannotTrain(c);
            } catch (RuntimeException | Error e) { // our bug; still no crash
                LOG.log(Level.SEVERE, id() + ": answering task " + task.taskId() + " failed", e);
                try {
                    c.act(s -> s.close(Codes.INTERNAL_ERROR, "internal error"));
                } catch (RuntimeException | Error again) {
                    LOG.log(Level.SEVERE, id() + ": cannot even close the session", again);
                }
            }
        });
    }

    /**
     * Trains one task; returns its answer (a result or an error) to send, or null if there is
     * none. Whatever the trainer throws is the caller's to turn into an answer ({@link #failed}).
     */
    private Consumer<DeviceSession> train(Connection c, Training t, Message.Task task, JobBinding job, double arrivedAt)
            throws Exception {
        Shard shard = shard(job);
        Path program = cfg.cache().path(job.programSha256()).orElse(null);
        if (shard == null || program == null) {
            // Section 6: a device that lost a listed artifact says so and reconnects with a true list.
            return s -> s.close(Codes.MISSING_ARTIFACT, "the device no longer holds an artifact of job " + job.jobId());
        }
        double deadlineAt = task.deadlineS() == null ? Double.POSITIVE_INFINITY : arrivedAt + task.deadlineS();
        TrainingTask tt = new TrainingTask(task.taskId(), task.jobId(), task.round(), job.model(), program, shard,
                task.tensors(), task.epochs(), task.batchSize(), task.lr(), task.momentum(), task.weightDecay(),
                deadlineAt, seed(task));
        double downloadS = cfg.clock().now() - arrivedAt; // 5.5: arrival to weights and data ready
        if (t.cancelled) {
            return error(Codes.CANCELLED, "cancelled", task.taskId());
        }
        if (cfg.clock().now() > deadlineAt) {
            // 5.4: a device past the deadline does not start the task (the coordinator no longer
            // uses the result); the same code and reason as the Python emulated device.
            return error(Codes.CANCELLED, "the deadline passed before training", task.taskId());
        }
        TrainingResult r = cfg.trainer().train(tt, () -> t.cancelled);
        if (t.cancelled) { // 5.6: the coordinator no longer needs it; do not upload
            return error(Codes.CANCELLED, "cancelled", task.taskId());
        }
        if (!sameSpec(task.tensors(), r.weights())) {
            LOG.warning(id() + ": the trainer returned weights unlike the task's");
            return error(Codes.TASK_FAILED, "trainer returned weights unlike the task's", task.taskId());
        }
        if (!Double.isFinite(r.meanLoss()) || !r.weights().stream().allMatch(Tensor::allFinite)) {
            return error(Codes.DIVERGED, "loss or weights became NaN or infinite", task.taskId()); // 5.8
        }
        Double uploadS;
        try {
            uploadS = c.lastUploadS();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null; // the device is stopping
        }
        Message.Result result = new Message.Result(task.taskId(), task.jobId(), task.round(), r.samples(),
                r.meanLoss(), new Message.Timing(Math.max(0, downloadS), Math.max(0, r.computeS()), uploadS),
                cfg.facts().resultExtras(task), r.weights());
        return s -> {
            try {
                if (s.sendResult(result)) {
                    stats.results.incrementAndGet();
                    LOG.fine(() -> id() + String.format(": task %s (%s round %d): result, download %.3f s, compute %.3f s",
                            task.taskId(), task.jobId(), task.round(), result.timing().downloadS(), result.timing().computeS()));
                }
            } catch (ProtocolException e) {
                LOG.warning(id() + ": result of " + task.taskId() + " would be refused: " + e.getMessage());
                error(Codes.TASK_FAILED, "result would be refused (" + e.code() + ")", task.taskId()).accept(s);
            }
        };
    }

    /**
     * The answer to a task whose handling threw {@code e} (5.8), whatever it is: cancelled when
     * the task was (with the trainer's reason, if any); {@code task_failed} with the trainer's reason when it
     * refused the task ({@link TaskRefusedException}) or when no task can ever train here
     * ({@link Stop#CANNOT_TRAIN}); else {@code task_failed} naming the throwable's class (its
     * details go to the log only, as section 8 asks of reasons).
     */
    private Consumer<DeviceSession> failed(Training t, String taskId, Throwable e) {
        if (e instanceof CancellationException) {
            // The trainer says why when it stopped by itself (the deadline passed during training).
            return error(Codes.CANCELLED, e.getMessage() == null ? "cancelled" : e.getMessage(), taskId);
        }
        if (e instanceof TaskRefusedException && e.getMessage() != null) {
            LOG.info(id() + ": task " + taskId + " refused: " + e.getMessage());
            return error(t.cancelled ? Codes.CANCELLED : Codes.TASK_FAILED, e.getMessage(), taskId);
        }
        if (e instanceof InterruptedException) {
            // Only run() interrupts this thread, when the device stops: keep the interrupt.
            Thread.currentThread().interrupt();
            return error(Codes.CANCELLED, "the device is stopping", taskId);
        }
        String never = cannotTrainReason(e);
        if (never != null) {
            if (cannotTrain.compareAndSet(null, never)) {
                LOG.log(Level.SEVERE, id() + ": no task can ever train on this device: " + never, e);
            }
            return error(t.cancelled ? Codes.CANCELLED : Codes.TASK_FAILED, never, taskId);
        }
        LOG.log(Level.WARNING, id() + ": training task " + taskId + " failed", e);
        return error(t.cancelled ? Codes.CANCELLED : Codes.TASK_FAILED,
                e instanceof OutOfMemoryError ? "out of memory" : "training raised " + e.getClass().getSimpleName(),
                taskId);
    }

    /**
     * Why no task can ever train here, if {@code e} (or a cause of it) says so: a
     * {@link CannotTrainException}'s message, or a {@link LinkageError} (a native library or a
     * class that cannot load stays so for the life of the process); else null.
     */
    static String cannotTrainReason(Throwable e) {
        Throwable x = e;
        for (int depth = 0; x != null && depth < 16; depth++, x = x.getCause()) { // bounded: causes may cycle
            if (x instanceof CannotTrainException) {
                return x.getMessage();
            }
            if (x instanceof LinkageError) {
                return "the trainer cannot load on this device: " + x.getClass().getSimpleName() + ": " + x.getMessage();
            }
        }
        return null;
    }

    /** Once a task found that none can ever train here: tell the listener, and leave with a bye. */
    private void giveUpIfCannotTrain(Connection c) {
        String why = cannotTrain.get();
        if (why == null || saidCannotTrain) {
            return;
        }
        saidCannotTrain = true;
        try {
            listener.cannotTrain(why); // before the bye: the listener hears it before sessionEnded
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, id() + ": the listener failed", e);
        }
        c.act(s -> s.close(Codes.GOING_AWAY, "cannot train: " + why)); // run() then returns CANNOT_TRAIN
    }

    /** An error answering a pending task (5.8), if the session still has it pending. */
    private Consumer<DeviceSession> error(String code, String reason, String taskId) {
        return s -> {
            if (s.pendingTasks().containsKey(taskId) && s.sendError(code, reason, taskId)) {
                stats.errors.incrementAndGet();
                LOG.fine(() -> id() + ": task " + taskId + ": error " + code + " (" + reason + ")");
            }
        };
    }

    /**
     * The task's seed; when the coordinator sent none (an older one), a seed the device draws
     * itself, logged at INFO so that the run can be replayed (docs/models.md): the level the app's
     * logcat handler and mjfl-device's log keep.
     */
    private long seed(Message.Task task) {
        if (task.seed() != null) {
            return task.seed();
        }
        long drawn = java.util.concurrent.ThreadLocalRandom.current().nextLong() >>> 1; // 0 to 2^63 - 1
        LOG.info(id() + ": task " + task.taskId() + " carries no seed; the device drew " + drawn);
        return drawn;
    }

    private static boolean sameSpec(List<Tensor> want, List<Tensor> got) {
        if (got == null || want.size() != got.size()) {
            return false;
        }
        for (int i = 0; i < want.size(); i++) {
            if (!want.get(i).sameSpec(got.get(i))) {
                return false;
            }
        }
        return true;
    }

    private void cancelTraining() {
        Training t = training.get();
        if (t != null) {
            t.cancelled = true;
        }
    }

    private static String describe(Connection.Ending end) {
        SessionEvent.Closed c = end.closure();
        if (c == null) {
            return end.failure() == null ? "closed" : "failed: " + end.failure();
        }
        if (c.code() == null) {
            return c.reason();
        }
        return (c.byPeer() ? "coordinator said bye " : "said bye ") + c.code() + " (" + c.reason() + ")";
    }
}
