package org.mjfl.client.net;

/** A monotonic clock in seconds; the scale of every {@code now} in the session (section 10). */
@FunctionalInterface
public interface Clock {
    double now();

    /** {@link System#nanoTime()} in seconds: monotonic, arbitrary origin. */
    Clock SYSTEM = () -> System.nanoTime() / 1e9;
}
