package org.mjfl.app;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;

/**
 * What the screen shows, shared by the service (which writes it) and the activity (which
 * listens): the device, its connection, the task in training and the last answer. Listeners
 * run on the writer's thread; the activity moves them to its own.
 */
public final class StatusBoard {
    /**
     * One snapshot.
     *
     * @param connection e.g. "connecting", "connected to coord-1", "reconnecting in 2.00 s"
     * @param task the task in training ("cnn round 3 (t-0007)"), or null when idle
     * @param lastAnswer how the last task was answered, or null before the first
     * @param deviceState the last battery and thermal reading, or null
     */
    public record Status(String deviceId, String url, String connection, String task, String lastAnswer,
            String deviceState) {
        static final Status EMPTY = new Status(null, null, "not started", null, null, null);
    }

    private static final StatusBoard SHARED = new StatusBoard();

    private final List<Consumer<Status>> listeners = new CopyOnWriteArrayList<>();
    private Status status = Status.EMPTY;

    /** The app's one board (one process: the service and the activity). */
    public static StatusBoard shared() {
        return SHARED;
    }

    public synchronized Status status() {
        return status;
    }

    /** Adds a listener and calls it at once with the current status. */
    public void listen(Consumer<Status> listener) {
        listeners.add(listener);
        listener.accept(status());
    }

    public void unlisten(Consumer<Status> listener) {
        listeners.remove(listener);
    }

    public void started(String deviceId, String url) {
        set(new Status(deviceId, url, "connecting", null, null, status().deviceState()));
    }

    public void connection(String connection) {
        Status s = status();
        set(new Status(s.deviceId(), s.url(), connection, s.task(), s.lastAnswer(), s.deviceState()));
    }

    public void task(String task) {
        Status s = status();
        set(new Status(s.deviceId(), s.url(), s.connection(), task, s.lastAnswer(), s.deviceState()));
    }

    public void answered(String answer) {
        Status s = status();
        set(new Status(s.deviceId(), s.url(), s.connection(), null, answer, s.deviceState()));
    }

    public void deviceState(String state) {
        Status s = status();
        set(new Status(s.deviceId(), s.url(), s.connection(), s.task(), s.lastAnswer(), state));
    }

    private void set(Status next) {
        synchronized (this) {
            status = next;
        }
        for (Consumer<Status> l : listeners) {
            l.accept(next);
        }
    }
}
