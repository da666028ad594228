package org.mjfl.app;

import java.util.function.BooleanSupplier;
import org.mjfl.client.net.Clock;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * A {@link Trainer} that keeps the CPU awake while a task trains: a phone with its screen off
 * trains at full speed, on battery as on power. Between tasks, a phone on power is kept awake by
 * {@link StayAwake}; one on battery sleeps, and the coordinator's packets wake it (protocol.md
 * section 10).
 *
 * <p>The wake lock is taken per task with a timeout, so that nothing can keep it forever: the
 * time to the task's deadline (protocol.md 5.4; the trainer stops at the deadline), at most
 * {@link #LONGEST_S} without one, plus {@link #ANSWER_S}. When training ends, however it ends,
 * the lock is cut down to {@link #ANSWER_S}: the device sends its answer right after, and a CPU
 * that slept at once would hold the result back until the next packet woke it.
 */
public final class WakefulTrainer implements Trainer {
    /** The phone's wake lock as this trainer uses it (DeviceService adapts PowerManager.WakeLock). */
    public interface WakeLock {
        /** Keeps the CPU awake from now for at most {@code ms}, replacing an earlier bound. */
        void holdFor(long ms);
    }

    /** The longest a task keeps the phone awake when it has no deadline (or a later one). */
    static final double LONGEST_S = 30 * 60;
    /** Kept after training, for the answer to leave. */
    static final double ANSWER_S = 10;

    private final Trainer inner;
    private final WakeLock lock;
    private final Clock clock;

    /** @param clock the scale of {@link TrainingTask#deadlineAt()} (the device's clock) */
    public WakefulTrainer(Trainer inner, WakeLock lock, Clock clock) {
        this.inner = inner;
        this.lock = lock;
        this.clock = clock;
    }

    @Override
    public TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        lock.holdFor(holdMs(task.deadlineAt(), clock.now()));
        try {
            return inner.train(task, cancelled);
        } finally {
            lock.holdFor(millis(ANSWER_S));
        }
    }

    /** How long a task that starts {@code now} keeps the phone awake, in ms. */
    static long holdMs(double deadlineAt, double now) {
        double left = deadlineAt - now;
        double s = left >= 0 ? Math.min(LONGEST_S, left) : left < 0 ? 0 : LONGEST_S; // NaN: the bound
        return millis(s + ANSWER_S);
    }

    private static long millis(double s) {
        return (long) Math.ceil(s * 1000);
    }
}
