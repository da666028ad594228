package org.mjfl.client.train;

import java.util.function.BooleanSupplier;

/**
 * Trains one task. The device calls it on its training thread, one task at a time, and turns
 * the outcome into the answer: a result, or {@code error task_failed} if it throws,
 * {@code error diverged} if the weights or loss are not finite, {@code error cancelled} if it
 * throws {@link java.util.concurrent.CancellationException} or the task was cancelled meanwhile
 * (protocol.md 5.6, 5.8). Any throwable is an answer, never a crash; a {@link LinkageError} or
 * {@link CannotTrainException} means no task can ever train here, and the device leaves
 * ({@link org.mjfl.client.Device.Stop#CANNOT_TRAIN}). A task whose deadline passed before it
 * starts is answered {@code error cancelled} without calling the trainer (5.4).
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
