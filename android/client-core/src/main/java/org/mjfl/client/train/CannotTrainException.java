package org.mjfl.client.train;

/**
 * Thrown by a {@link Trainer} when no task can ever train on this device, whatever the task:
 * its runtime cannot load (a native library missing for the phone's ABI), the device lacks
 * what every program needs. The message says why, for the lab: it becomes the reason of the
 * task's {@code error task_failed} and of the device's bye (see {@link org.mjfl.client.Device}).
 *
 * <p>A {@link LinkageError} from a trainer (UnsatisfiedLinkError, NoClassDefFoundError,
 * ExceptionInInitializerError) is taken the same way; a trainer that knows more about its
 * runtime wraps it in this with a clearer message.
 */
public final class CannotTrainException extends Exception {
    private static final long serialVersionUID = 1L;

    public CannotTrainException(String message, Throwable cause) {
        super(message, cause);
    }
}
