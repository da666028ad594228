package org.mjfl.client.train;

import java.nio.file.Path;
import java.util.List;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;

/**
 * One task to train (protocol.md 5.4), everything loaded.
 *
 * @param program the job's ExecuTorch {@code .pte} file, verified (section 11.6)
 * @param weights the global weights, read-only, in state-dict order: the result returns the
 *     same names, dtypes and shapes in this order
 * @param deadlineAt when the coordinator stops waiting, on {@link org.mjfl.client.net.Clock}'s
 *     scale (the task's arrival plus {@code deadline_s}); +infinity without a deadline
 * @param seed the task generator's seed, 0 to 2^63 - 1 (docs/models.md, "The task generator"):
 *     the task's, or one the device drew when the coordinator sent none
 */
public record TrainingTask(String taskId, String jobId, long round, Message.ModelSpec model, Path program,
        Shard shard, List<Tensor> weights, long epochs, long batchSize, double lr, double momentum,
        double weightDecay, double deadlineAt, long seed) {}
