package org.mjfl.app.training;

import java.util.List;
import java.util.Map;

/**
 * A loaded training program, the runtime side of the contract: on Android ExecuTorch
 * ({@code org.mjfl.app.ExecuTorchProgram}), in tests a few lines of plain Java. It is used by
 * one thread at a time.
 */
public interface TrainingProgram extends AutoCloseable {
    /** The training method of mjfl's programs (docs/models.md, "The training program"). */
    String METHOD = "forward";

    ProgramSignature signature();

    /**
     * Writes {@code parameters} (program name -> values, C-order) into the program's own
     * parameter tensors and creates the task's SGD on them, with dampening 0 and no Nesterov;
     * its momentum buffers start at zero. The caller closes the run when the task ends.
     */
    TaskRun start(Map<String, float[]> parameters, double lr, double momentum, double weightDecay) throws Exception;

    /** Frees the program's runtime memory; it is not used after. */
    @Override
    void close();

    /**
     * One task's steps on a program: one optimizer, created by {@link #start}, released by
     * {@link #close()} (success, failure or cancellation alike). Batches come from one
     * {@link StepInputs}, whose buffers are reused per batch size: a run may wrap each once.
     */
    interface TaskRun extends AutoCloseable {
        /** Runs {@code forward} on the batch, then one SGD step on its gradients. */
        StepOutputs step(Batch batch) throws Exception;

        /** The parameter's current values, a copy. */
        float[] parameter(String programName) throws Exception;

        /** Releases the optimizer (its momentum buffers) and whatever the steps kept; idempotent. */
        @Override
        void close();
    }

    /**
     * What a step hands back before its gradients (docs/models.md, "Outputs of one step").
     *
     * @param loss the batch's mean cross-entropy
     * @param batchStats per batch-norm layer its batch mean then its biased variance (2 per layer)
     */
    record StepOutputs(float loss, List<float[]> batchStats) {
        public StepOutputs {
            batchStats = List.copyOf(batchStats);
        }
    }
}
