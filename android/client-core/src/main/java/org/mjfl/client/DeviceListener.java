package org.mjfl.client;

/**
 * What a {@link Device}'s connection is doing, for a user interface (the Android app's status
 * screen). Called on the device's threads: keep each call short and hand the news over.
 */
public interface DeviceListener {
    /** A session opened: the coordinator welcomed the device. */
    default void welcomed(String coordinatorId) {}

    /** A session ended; {@code why} says how (a bye, a lost connection, a refusal). */
    default void sessionEnded(String why) {}

    /** The device waits {@code delayS} seconds before connecting again (backoff). */
    default void reconnecting(double delayS) {}
}
