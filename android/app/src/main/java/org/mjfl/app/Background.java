package org.mjfl.app;

import java.util.function.BiConsumer;

/** Work the main thread must not wait for. */
final class Background {
    private Background() {}

    /**
     * Closes {@code c} on a thread of its own and returns at once: closing the trainer waits for a
     * task still in training to reach its next step (or for a program still loading), which on the
     * main thread would be an "application not responding". A failure is logged, never thrown.
     *
     * @param log (line, error) for a close that failed
     */
    static Thread close(AutoCloseable c, String what, BiConsumer<String, Exception> log) {
        Thread t = new Thread(() -> {
            try {
                c.close();
            } catch (Exception e) {
                log.accept("cannot close the " + what, e);
            }
        }, "mjfl-close-" + what);
        t.setDaemon(true);
        t.start();
        return t;
    }
}
