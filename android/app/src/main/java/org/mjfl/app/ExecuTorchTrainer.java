package org.mjfl.app;

import java.util.SplittableRandom;
import java.util.function.BooleanSupplier;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * client-core's {@link Trainer} on ExecuTorch: each task is trained as docs/models.md, "Training
 * a task on a device", says ({@link ProgramTrainer} does the contract, {@link ExecuTorchProgram}
 * runs the steps). Programs stay loaded between rounds; {@link #close()} frees them.
 */
public final class ExecuTorchTrainer implements Trainer, AutoCloseable {
    private final ProgramTrainer trainer = new ProgramTrainer(ExecuTorchProgram::load, new SplittableRandom());

    @Override
    public synchronized TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        return trainer.train(task, batchNormPixels(task.model()), cancelled);
    }

    /**
     * The provision's {@code batch_norm_pixels} (protocol.md 5.3). client-core's
     * {@code Message.ModelSpec} does not carry it yet: until it does, every model is taken to
     * have no batch norm, and a task of one that has (the task holds running statistics) fails
     * with {@code task_failed} ("the provision's batch_norm_pixels lists 0") instead of training
     * with wrong statistics.
     */
    static long[] batchNormPixels(Message.ModelSpec model) {
        return new long[0];
    }

    @Override
    public synchronized void close() {
        trainer.close();
    }
}
