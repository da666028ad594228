package org.mjfl.app;

/**
 * The service's decisions about its device, apart from Android (DeviceService calls it on the
 * main thread only): whether a start runs a device, and whether a device's end stops the service.
 *
 * <p>A start with the request that runs now changes nothing; another request replaces the
 * device; a start after the device stopped runs it again. When the device stops by itself (the
 * coordinator's bye, a refusal, a phone that cannot train, a start that failed), the service
 * stops too: its notification goes and nothing keeps the phone awake. A device replaced by a
 * newer start is not the service's end.
 */
final class DeviceRuns {
    /** What a start does. */
    enum Start { NOTHING, RUN, REPLACE }

    private DeviceRequest current;
    private long run; // counts the devices started; identifies the current one
    private boolean running;

    /** A start command with {@code request}: what to do; after RUN or REPLACE, {@link #current()} is the new run. */
    Start start(DeviceRequest request) {
        if (running && request.equals(current)) {
            return Start.NOTHING;
        }
        Start what = running ? Start.REPLACE : Start.RUN;
        current = request;
        run++;
        running = true;
        return what;
    }

    /** The run started last. */
    long current() {
        return run;
    }

    /** Run {@code which} stopped by itself; true when the service should stop (it was the current run). */
    boolean ended(long which) {
        if (which != run || !running) {
            return false;
        }
        running = false;
        current = null;
        return true;
    }

    /** True while the current run's device runs. */
    boolean running() {
        return running;
    }
}
