package org.mjfl.app;

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
    private final ProgramTrainer trainer = new ProgramTrainer(ExecuTorchProgram::load);

    @Override
    public synchronized TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        return trainer.train(task, batchNormPixels(task.model()), cancelled);
    }

    /** The provision's {@code batch_norm_pixels} (protocol.md 5.3): empty for a model without batch norm. */
    static long[] batchNormPixels(Message.ModelSpec model) {
        return model.batchNormPixels().stream().mapToLong(Long::longValue).toArray();
    }

    @Override
    public synchronized void close() {
        trainer.close();
    }
}
