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
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * One device (testbed.md section 3, protocol.md section 11): connects, says hello with its
 * cached artifacts, stores what provisions bring, trains one task at a time with its
 * {@link org.mjfl.client.train.Trainer} and answers each with a result or an error, and
 * reconnects with backoff after a lost connection, a protocol error or a heartbeat timeout.
 *
 * <p>It stops on {@link #stop()} (bye {@code going_away}), on the coordinator's bye
 * {@code going_away}/{@code normal} when so configured, and on {@code unauthorized} or
 * {@code unsupported_version}, where retrying cannot help.
 */
public final class Device {
    private static final Logger LOG = Logger.getLogger(Device.class.getName());
    private static final DeviceListener NO_LISTENER = new DeviceListener() {};
    private volatile DeviceListener listener = NO_LISTENER;
    private static final int SHARDS_IN_MEMORY = 4;

    /** Why {@link #run()} returned. */
    public enum Stop { STOPPED, COORDINATOR_BYE, REFUSED }

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
        } catch (IOException | RuntimeException e) {
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
        Training t = new Training(task.taskId());
        if (!training.compareAndSet(null, t)) {
            c.act(error(Codes.BUSY, "the device trains one task at a time", task.taskId()));
            return;
        }
        trainingThread.execute(() -> {
            Consumer<DeviceSession> answer = null;
            try {
                answer = train(c, t, task, job, arrivedAt);
            } finally {
                // Free the slot before answering: the coordinator may send the next task as soon
                // as it reads the answer, and must not be told busy.
                training.compareAndSet(t, null);
                if (answer != null) {
                    c.act(answer);
                }
            }
        });
    }

    /** Trains one task; returns its answer (a result or an error) to send, or null if there is none. */
    private Consumer<DeviceSession> train(Connection c, Training t, Message.Task task, JobBinding job, double arrivedAt) {
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
        TrainingResult r;
        try {
            if (t.cancelled) {
                throw new CancellationException();
            }
            r = cfg.trainer().train(tt, () -> t.cancelled);
        } catch (CancellationException e) {
            return error(Codes.CANCELLED, "cancelled", task.taskId());
        } catch (Exception | OutOfMemoryError | StackOverflowError e) {
            LOG.log(Level.WARNING, id() + ": training task " + task.taskId() + " failed", e);
            return error(t.cancelled ? Codes.CANCELLED : Codes.TASK_FAILED,
                    e instanceof OutOfMemoryError ? "out of memory" : "training raised " + e.getClass().getSimpleName(),
                    task.taskId());
        }
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
     * itself, logged so that the run can be replayed.
     */
    private long seed(Message.Task task) {
        if (task.seed() != null) {
            return task.seed();
        }
        long drawn = java.util.concurrent.ThreadLocalRandom.current().nextLong() >>> 1; // 0 to 2^63 - 1
        LOG.fine(() -> id() + ": task " + task.taskId() + " carries no seed; the device drew " + drawn);
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
