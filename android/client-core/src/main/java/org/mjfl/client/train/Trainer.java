package org.mjfl.client.train;

import java.util.function.BooleanSupplier;

/**
 * Trains one task. The device calls it on its training thread, one task at a time, and turns
 * the outcome into the answer: a result, or {@code error task_failed} if it throws,
 * {@code error diverged} if the weights or loss are not finite, {@code error cancelled} if it
 * throws {@link java.util.concurrent.CancellationException} or the task was cancelled meanwhile
 * (protocol.md 5.6, 5.8).
 *
 * <p>The Android app plugs in its ExecuTorch trainer here; the JVM uses {@link StandInTrainer}.
 */
public interface Trainer {
    /**
     * @param cancelled true once the coordinator cancelled the task: stop soon (between batches)
     *     by throwing {@link java.util.concurrent.CancellationException}
     */
    TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception;
}
