package org.mjfl.client.net;

import java.util.function.LongSupplier;

/**
 * A monotonic clock in seconds; the scale of every {@code now} in the session (section 10): the
 * heartbeats' due and expiry times and the tasks' deadlines.
 */
@FunctionalInterface
public interface Clock {
    double now();

    /**
     * {@link System#nanoTime()} in seconds: monotonic, arbitrary origin. On Android it is
     * CLOCK_MONOTONIC, which stops while the phone is suspended: a phone that slept would think
     * less time had passed than its coordinator did. The app injects Android's elapsed-realtime
     * clock instead ({@link #ofNanos} of {@code SystemClock.elapsedRealtimeNanos}).
     */
    Clock SYSTEM = ofNanos(System::nanoTime);

    /** A clock of a platform's monotonic nanosecond counter (client-core names no platform's). */
    static Clock ofNanos(LongSupplier nanos) {
        return () -> nanos.getAsLong() / 1e9;
    }
}
