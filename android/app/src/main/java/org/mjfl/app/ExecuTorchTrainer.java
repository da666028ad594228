package org.mjfl.app;

import java.util.function.BooleanSupplier;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * client-core's {@link Trainer} on ExecuTorch: each task is trained as docs/models.md, "Training
 * a task on a device", says ({@link ProgramTrainer} does the contract, {@link ExecuTorchProgram}
 * runs the steps). Programs stay loaded between rounds while memory allows; {@link #close()}
 * frees them.
 */
public final class ExecuTorchTrainer implements Trainer, AutoCloseable {
    private final ProgramTrainer trainer;

    /**
     * @param memory what the device can give programs (on a phone, {@link AndroidMemory})
     * @param clock the device's clock ({@code DeviceConfig.clock()}, {@link Clock#SYSTEM} unless
     *     set): the scale of a task's deadline
     */
    public ExecuTorchTrainer(MemoryBudget memory, Clock clock) {
        trainer = new ProgramTrainer(ExecuTorchProgram::load, memory, clock);
    }

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
