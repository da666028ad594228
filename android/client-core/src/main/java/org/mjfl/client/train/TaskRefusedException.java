package org.mjfl.client.train;

/**
 * Thrown by a {@link Trainer} when this task cannot train, for a reason the lab should read:
 * its program does not fit the training contract or the phone's memory, its batch size is above
 * the program's bound. The message becomes the reason of the task's {@code error task_failed}
 * (protocol.md 5.8), so it says what was wrong with the task, never the device's internals.
 * Other tasks may still train: unlike {@link CannotTrainException}, the device keeps serving.
 */
public class TaskRefusedException extends Exception {
    private static final long serialVersionUID = 1L;

    public TaskRefusedException(String message) {
        super(message);
    }
}
