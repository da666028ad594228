package org.mjfl.app;

import java.nio.file.Path;
import java.util.List;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingTask;

/** A small task for the app's tests. */
final class Tasks {
    private Tasks() {}

    /** Job cnn, round 3, task t-7, due at {@code deadlineAt} on the device's clock. */
    static TrainingTask dueAt(double deadlineAt) {
        return task("t-7", deadlineAt);
    }

    /** The same task with id {@code taskId}, without a deadline. */
    static TrainingTask withId(String taskId) {
        return task(taskId, Double.NaN);
    }

    private static TrainingTask task(String taskId, double deadlineAt) {
        return new TrainingTask(taskId, "cnn", 3, new Message.ModelSpec("cnn", List.of(1L), 2), Path.of("p.pte"),
                new Shard(1, List.of(1L), new float[1], new long[1]), List.of(), 1, 1, 0.1, 0, 0, deadlineAt, 7);
    }
}
