package org.mjfl.app.training;

import org.mjfl.client.train.TaskRefusedException;

/**
 * The program or the task does not fit the training contract (docs/models.md): a program that
 * is not a training program, parameters that differ from the task's, a batch size above the
 * program's bound. The device answers {@code error task_failed} with the message as reason.
 */
public final class ProgramException extends TaskRefusedException {
    private static final long serialVersionUID = 1L;

    public ProgramException(String message) {
        super(message);
    }
}
