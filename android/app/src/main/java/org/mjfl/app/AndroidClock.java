package org.mjfl.app;

import android.os.SystemClock;
import org.mjfl.client.net.Clock;

/**
 * The app's clock: Android's elapsed realtime, which goes on counting while the phone is
 * suspended ({@code System.nanoTime()}, client-core's default, stops). Every clock the app hands
 * client-core and the trainer is this one, so that a phone that slept after a task arrived sees
 * its deadline as passed, and one that slept between heartbeats sees the time it slept.
 */
final class AndroidClock {
    static final Clock ELAPSED = Clock.ofNanos(SystemClock::elapsedRealtimeNanos);

    private AndroidClock() {}
}
