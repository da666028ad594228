package org.mjfl.app.selftest;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.ProtocolException;
import org.mjfl.client.protocol.Sha256;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingTask;

/**
 * One golden case, read from its folder: the wire protocol's own messages, decoded by
 * client-core's {@link Codec} exactly as a run's are.
 *
 * <pre>
 * program.pte      the training program
 * provision.mjfl   provision: model spec, program sha256, the shard inline (x, y)
 * task.mjfl        task: initial weights, training parameters, seed
 * expected.mjfl    result: the Python runtime's trained weights and mean loss
 * </pre>
 */
public record GoldenCase(String name, Path program, Message.Provision provision, Message.Task task,
        Message.Result expected, Shard shard) {

    /**
     * Reads and checks a case: the program is the one the provision names, the task is for that
     * program and shard, the shard is inline.
     *
     * @throws IOException when a file is missing, does not decode, or does not fit the others
     */
    public static GoldenCase read(Path folder, String name) throws IOException {
        Path program = folder.resolve("program.pte");
        Message.Provision provision = decode(folder, "provision.mjfl", Message.Provision.class);
        Message.Task task = decode(folder, "task.mjfl", Message.Task.class);
        Message.Result expected = decode(folder, "expected.mjfl", Message.Result.class);
        String sha = Sha256.of(Files.readAllBytes(program));
        if (!sha.equals(provision.programSha256())) {
            throw new IOException(name + ": program.pte is not the program the provision names (sha256 " + sha
                    + "): copied incompletely?");
        }
        if (!task.programSha256().equals(provision.programSha256())
                || !task.shardSha256().equals(provision.shardSha256())) {
            throw new IOException(name + ": the task is not for the provision's program and shard");
        }
        if (task.seed() == null) {
            throw new IOException(name + ": the task has no seed, so its batches and noise are not fixed");
        }
        Tensor x = provision.tensor("x");
        Tensor y = provision.tensor("y");
        if (x == null || y == null) {
            throw new IOException(name + ": the provision carries no shard");
        }
        return new GoldenCase(name, program, provision, task, expected, Shard.fromTensors(x, y, provision.model()));
    }

    /** The task as the trainer gets it in a run, training {@code programCopy} without a deadline. */
    public TrainingTask trainingTask(Path programCopy) {
        return new TrainingTask(task.taskId(), task.jobId(), task.round(), provision.model(), programCopy, shard,
                task.tensors(), task.epochs(), task.batchSize(), task.lr(), task.momentum(), task.weightDecay(),
                Double.POSITIVE_INFINITY, task.seed());
    }

    /** The provision's batch_norm_pixels, as the trainer takes them. */
    public long[] batchNormPixels() {
        return provision.model().batchNormPixels().stream().mapToLong(Long::longValue).toArray();
    }

    private static <T extends Message.Binary> T decode(Path folder, String file, Class<T> type) throws IOException {
        Path path = folder.resolve(file);
        try {
            Message.Binary m = Codec.decodeBinary(ByteBuffer.wrap(Files.readAllBytes(path)), Codec.VERSION, null);
            if (!type.isInstance(m)) {
                throw new IOException(path + " is a " + m.type() + " message, expected " + type.getSimpleName());
            }
            return type.cast(m);
        } catch (ProtocolException e) {
            throw new IOException(path + " does not decode: " + e.getMessage(), e);
        }
    }
}
