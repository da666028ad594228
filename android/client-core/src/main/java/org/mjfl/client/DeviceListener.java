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

    /**
     * No task can ever train on this device ({@link Device.Stop#CANNOT_TRAIN}): {@code why} says
     * what failed, e.g. a native runtime that cannot load on this phone's ABI. The task that
     * found it was answered; the device now says bye and stops.
     */
    default void cannotTrain(String why) {}
}
